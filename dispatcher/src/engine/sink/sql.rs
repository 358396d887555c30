//! The SQL sink: the consumer's statement, applied in the transaction that moves the cursor.
//!
//! A batch costs three round trips whatever its size, and the first batch of a claim one more:
//! `highwater.sql_sink_prepare` before the cursor transaction (a no-op once the session has the
//! statement's functions; the pass skips it while it keeps the claim's connection); `BEGIN` with
//! the transaction-local settings, one simple query ([`SqlSink`]'s `begin`); one statement that
//! calls `highwater.sql_sink_apply` (migrations/20261201000001_sql_sink_batch.sql) naming the
//! batch by its ids, which reads the events and runs the statement per event (or once over the
//! batch, `form: set`) server-side, planned once, and moves the cursor if every event applied;
//! then `COMMIT`.
use std::{sync::LazyLock, time::Duration};

use async_trait::async_trait;
use highwater_crds::{MAX_SQL_TIMEOUT, SqlForm, SqlSink as SqlSinkSpec};
use sqlx::{FromRow, PgConnection};

use super::{DeliveryContext, Sink, SinkError};
use crate::{Error, Event, Result, shards::Advance};

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
        // Validation refuses it too; checked here as well because `begin` must not fail.
        if timeout > MAX_SQL_TIMEOUT {
            return Err(Error::config(format!(
                "sink.sql.timeout {:?} is over PostgreSQL's statement_timeout limit ({}); write at most that, or 0s for none",
                spec.timeout.as_deref().unwrap_or_default(),
                humantime::format_duration(MAX_SQL_TIMEOUT)
            )));
        }
        Ok(SqlSink {
            statement: spec.statement.clone(),
            form: spec.form,
            role: spec.role.clone(),
            timeout_ms: timeout.as_millis() as u64,
        })
    }

    /// One call of `highwater.sql_sink_apply`: `Ok` when every event applied; otherwise nothing
    /// of this call is applied and the error names the first failing event. The events are
    /// named (ids and their transaction-id range), not sent: the server reads them itself. With
    /// `advance`, the same statement moves the cursor if every event applied, and `Ok` tells
    /// whether it moved.
    async fn apply(
        &self,
        conn: &mut PgConnection,
        events: &[Event],
        single: bool,
        advance: Option<&Advance<'_>>,
    ) -> Result<bool, SinkError> {
        let (Some(first), Some(last)) = (events.first(), events.last()) else { return Ok(true) };
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let sql = if advance.is_some() { &*APPLY_AND_ADVANCE } else { APPLY };
        let q = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(self.form.as_str())
            .bind(&self.statement)
            .bind(&self.role)
            .bind(single)
            .bind(first.position().xid8())
            .bind(last.position().xid8())
            .bind(ids);
        let q = match advance {
            Some(a) => a.bind(q),
            None => q,
        };
        let row = q.fetch_one(conn).await.map_err(|e| fail(0, e))?;
        let (failed, deferred, message, moved): (Option<i32>, Option<bool>, Option<String>, i64) =
            FromRow::from_row(&row).map_err(|e| fail(0, e))?;
        let Some(index) = failed else { return Ok(moved > 0) };
        let index = (index.max(0) as usize).min(events.len() - 1);
        let deferred = deferred.unwrap_or(false) && index > 0;
        Err(SinkError { index, message: message.unwrap_or_default(), deferred })
    }

    /// A set statement fails for the batch as a whole: `apply` once more over one-event batches
    /// finds the event that fails (none, if the failure does not recur).
    fn find_failing(&self, events: &[Event], e: &SinkError) -> bool {
        self.form == SqlForm::Set && events.len() > 1 && !e.deferred
    }
}

const APPLY: &str = "SELECT failed, deferred, message, 0::bigint AS moved
                       FROM highwater.sql_sink_apply($1, $2, $3, $4, $5, $6, $7)";

/// The apply call and the cursor move in one statement. The move's condition reads the apply's
/// result (a materialised CTE, so the statement runs once, before the move is decided): it
/// happens only if every event applied.
static APPLY_AND_ADVANCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH a AS MATERIALIZED (
              SELECT failed, deferred, message FROM highwater.sql_sink_apply($1, $2, $3, $4, $5, $6, $7)),
              moved AS ({})
         SELECT a.failed, a.deferred, a.message, (SELECT count(*) FROM moved) AS moved FROM a",
        Advance::sql(8, "(SELECT failed FROM a) IS NULL")
    )
});

/// `s` as a string constant, whatever `standard_conforming_strings` says (an escape string: its
/// backslashes and quotes are doubled).
fn literal(s: &str) -> String {
    format!("E'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
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

    /// `statement_timeout` must be set before the statement it limits starts: it goes with
    /// `BEGIN`, as `set_config(..., true)` (SET LOCAL) of constants, and cannot fail (the timeout
    /// was checked against PostgreSQL's limit when the sink was built).
    fn begin(&self, consumer: &str, instance_id: &str) -> String {
        format!(
            "BEGIN; SELECT set_config('statement_timeout', '{}', true), \
             set_config('highwater.consumer', {}, true), set_config('highwater.instance_id', {}, true)",
            self.timeout_ms,
            literal(consumer),
            literal(instance_id)
        )
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let conn = ctx.tx.as_deref_mut().expect("transactional sink gets the cursor transaction");
        match self.apply(conn, events, false, None).await {
            Err(e) if self.find_failing(events, &e) => self.apply(conn, events, true, None).await.map(drop),
            r => r.map(drop),
        }
    }

    async fn deliver_and_advance(
        &self,
        ctx: &mut DeliveryContext<'_>,
        events: &[Event],
        advance: &Advance<'_>,
    ) -> Result<bool, SinkError> {
        let conn = ctx.tx.as_deref_mut().expect("transactional sink gets the cursor transaction");
        match self.apply(conn, events, false, Some(advance)).await {
            Err(e) if self.find_failing(events, &e) => {
                self.apply(conn, events, true, None).await?;
                advance.run(conn).await.map(|moved| moved.is_some()).map_err(|e| SinkError::at(0, e.to_string()))
            }
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_survive_quotes_and_backslashes() {
        assert_eq!(literal("orders"), "E'orders'");
        assert_eq!(literal(r"it's a \ path"), r"E'it''s a \\ path'");
    }

    #[test]
    fn a_timeout_beyond_postgresql_s_limit_is_refused() {
        let spec =
            |t: &str| SqlSinkSpec { statement: "SELECT 1".into(), timeout: Some(t.into()), ..Default::default() };
        assert!(SqlSink::new(&spec("24d")).is_ok());
        let err = SqlSink::new(&spec("30d")).err().expect("30d is over the limit").to_string();
        assert!(err.contains("sink.sql.timeout") && err.contains("24days 20h 31m 23s 647ms"), "{err}");
    }
}
