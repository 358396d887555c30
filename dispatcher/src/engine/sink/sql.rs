//! The SQL sink: the consumer's statement, applied in the transaction that moves the cursor.
//!
//! A batch costs two round trips whatever its size, and the first batch of a claim one more:
//! `highwater.sql_sink_prepare` before the cursor transaction (a no-op once the session has the
//! statement's functions; the pass skips it while it keeps the claim's connection), the
//! transaction-local settings, then one call of `highwater.sql_sink_apply`
//! (migrations/20261201000001_sql_sink_batch.sql) naming the batch by its ids, which reads the
//! events and runs the statement per event (or once over the batch, `form: set`) server-side,
//! planned once.
use std::time::Duration;

use async_trait::async_trait;
use highwater_crds::{SqlForm, SqlSink as SqlSinkSpec};
use sqlx::PgConnection;

use super::{DeliveryContext, Sink, SinkError};
use crate::{Error, Event, Result};

pub struct SqlSink {
    statement: String,
    form: SqlForm,
    role: Option<String>,
    timeout_ms: u64,
}

impl SqlSink {
    pub fn new(spec: &SqlSinkSpec) -> Result<Self> {
        let timeout = match &spec.timeout {
            Some(t) => {
                humantime::parse_duration(t).map_err(|e| Error::config(format!("sink.sql.timeout {t:?}: {e}")))?
            }
            None => Duration::from_secs(30),
        };
        Ok(SqlSink {
            statement: spec.statement.clone(),
            form: spec.form,
            role: spec.role.clone(),
            timeout_ms: timeout.as_millis() as u64,
        })
    }

    /// One call of `highwater.sql_sink_apply`: `Ok` when every event applied; otherwise nothing
    /// of this call is applied and the error names the first failing event. The events are
    /// named (ids and their transaction-id range), not sent: the server reads them itself.
    async fn apply(&self, conn: &mut PgConnection, events: &[Event], single: bool) -> Result<(), SinkError> {
        let (Some(first), Some(last)) = (events.first(), events.last()) else { return Ok(()) };
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let (failed, deferred, message): (Option<i32>, Option<bool>, Option<String>) = sqlx::query_as(
            "SELECT failed, deferred, message FROM highwater.sql_sink_apply($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(self.form.as_str())
        .bind(&self.statement)
        .bind(&self.role)
        .bind(single)
        .bind(first.position().xid8())
        .bind(last.position().xid8())
        .bind(ids)
        .fetch_one(conn)
        .await
        .map_err(|e| fail(0, e))?;
        let Some(index) = failed else { return Ok(()) };
        let index = (index.max(0) as usize).min(events.len() - 1);
        let deferred = deferred.unwrap_or(false) && index > 0;
        Err(SinkError { index, message: message.unwrap_or_default(), deferred })
    }
}

fn fail(index: usize, e: sqlx::Error) -> SinkError {
    let message = match e.as_database_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().unwrap_or_default()),
        None => e.to_string(),
    };
    SinkError::at(index, message)
}

#[async_trait]
impl Sink for SqlSink {
    fn kind(&self) -> &'static str {
        "sql"
    }

    fn transactional(&self) -> bool {
        true
    }

    fn needs_bodies(&self) -> bool {
        false
    }

    async fn prepare(&self, conn: &mut PgConnection) -> Result<(), SinkError> {
        let problem: Option<String> = sqlx::query_scalar("SELECT highwater.sql_sink_prepare($1, $2)")
            .bind(self.form.as_str())
            .bind(&self.statement)
            .fetch_one(conn)
            .await
            .map_err(|e| fail(0, e))?;
        problem.map_or(Ok(()), |m| Err(SinkError::at(0, m)))
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        if events.is_empty() {
            return Ok(());
        }
        let conn = ctx.tx.as_deref_mut().expect("transactional sink gets the cursor transaction");
        // statement_timeout must be set before the statement it limits starts, hence its own
        // round trip; set_config(..., true) is SET LOCAL with bind parameters.
        sqlx::query(
            "SELECT set_config('statement_timeout', $1, true),
                    set_config('highwater.consumer', $2, true), set_config('highwater.instance_id', $3, true)",
        )
        .bind(self.timeout_ms.to_string())
        .bind(ctx.consumer)
        .bind(ctx.instance_id)
        .execute(&mut *conn)
        .await
        .map_err(|e| fail(0, e))?;
        match self.apply(conn, events, false).await {
            // A set statement fails for the batch as a whole: run it over one-event batches to
            // find the event that fails (none, if the failure does not recur).
            Err(e) if self.form == SqlForm::Set && events.len() > 1 && !e.deferred => {
                self.apply(conn, events, true).await
            }
            r => r,
        }
    }
}
