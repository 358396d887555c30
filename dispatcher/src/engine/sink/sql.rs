//! The SQL sink: the consumer's statement, applied in the transaction that moves the cursor.
//!
//! A batch costs one round trip besides its read, whatever its size, and the first batch of a
//! claim one more: `highwater.sql_sink_prepare` before (a no-op once the session has the
//! statement's functions; the pass skips it while it keeps the claim's connection); then one
//! simple query, whose statements share one implicit transaction: the transaction-local
//! settings, then one statement that calls `highwater.sql_sink_apply_positions`
//! (migrations/definitions/) naming the batch by its events' positions, which reads the
//! events and runs the statement per event (or once over the batch, `form: set`) server-side,
//! planned once, and moves the cursor if every event applied. A failure's handling (finding the
//! failing event, applying the events before it) opens a transaction of its own.
use std::time::Duration;

use async_trait::async_trait;
use highwater_crds::{MAX_SQL_TIMEOUT, SqlForm, SqlSink as SqlSinkSpec, sql_timeout_too_long};
use sqlx::{FromRow, PgConnection};

use super::{Applied, DeliveryContext, Sink, SinkError, in_transaction, in_transaction_with};
use crate::{
    Error, Event, Result, Xid8, literal,
    shards::{self, Advance},
};

/// SQLSTATE of `highwater.sql_sink_refused` (migrations/20261202000020_sql_sink_refused.sql).
const REFUSED: &str = "HW001";

/// Every event of the batch applied, as the apply statement of [`SqlSink::apply_and_advance`]
/// left it for the statements after it.
const APPLIED: &str = "current_setting('highwater.sql_sink_applied') = 'true'";

pub struct SqlSink {
    statement: String,
    form: SqlForm,
    role: Option<String>,
    timeout_ms: u64,
    /// The consumer's `eventVersions` as `highwater.upcast_for` takes it: set as the
    /// transaction-local `highwater.event_versions`, which the session's generated code reads
    /// (sql_sink_prepare.sql). `None`: the setting stays empty, payloads as stored.
    pub event_versions: Option<serde_json::Value>,
}

impl SqlSink {
    pub fn new(spec: &SqlSinkSpec) -> Result<Self> {
        let timeout = match &spec.timeout {
            Some(t) => {
                humantime::parse_duration(t).map_err(|e| Error::config(format!("sink.sql.timeout {t:?}: {e}")))?
            }
            None => Duration::from_secs(30),
        };
        // Validation refuses it too; checked here as well because the settings must not fail.
        if timeout > MAX_SQL_TIMEOUT {
            return Err(Error::config(sql_timeout_too_long(spec.timeout.as_deref().unwrap_or_default())));
        }
        Ok(SqlSink {
            statement: spec.statement.clone(),
            form: spec.form,
            role: spec.role.clone(),
            timeout_ms: timeout.as_millis() as u64,
            event_versions: None,
        })
    }

    /// One call of `highwater.sql_sink_apply_positions` in the open transaction on `conn`: `Ok`
    /// when every event applied; otherwise nothing of this call is applied and the error names the
    /// first failing event. The events are named (their `(tx_id, id)` positions), not sent: the
    /// server reads them itself.
    async fn apply(&self, conn: &mut PgConnection, events: &[Event], single: bool) -> Result<(), SinkError> {
        if events.is_empty() {
            return Ok(());
        }
        let tx_ids: Vec<Xid8> = events.iter().map(|e| e.position().xid8()).collect();
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let (failed, deferred, message): (Option<i32>, Option<bool>, Option<String>) = sqlx::query_as(
            "SELECT failed, deferred, message FROM highwater.sql_sink_apply_positions($1, $2, $3, $4, $5, $6)",
        )
        .bind(self.form.as_str())
        .bind(&self.statement)
        .bind(&self.role)
        .bind(single)
        .bind(tx_ids)
        .bind(ids)
        .fetch_one(conn)
        .await
        .map_err(|e| fail(0, e))?;
        reported(events, failed, deferred, message)
    }

    /// The transaction-local settings. `statement_timeout` must be set before the statement it
    /// limits starts, hence a statement of their own ahead of it; `set_config(..., true)` is SET
    /// LOCAL. It cannot fail: the timeout was checked against PostgreSQL's limit when the sink
    /// was built.
    fn settings(&self, consumer: &str, instance_id: &str) -> String {
        let versions = match &self.event_versions {
            Some(v) => format!(", set_config('highwater.event_versions', {}, true)", literal::text(&v.to_string())),
            None => String::new(),
        };
        format!(
            "SELECT set_config('statement_timeout', '{}', true), set_config('highwater.consumer', {}, true), \
             set_config('highwater.instance_id', {}, true){versions}",
            self.timeout_ms,
            literal::text(consumer),
            literal::text(instance_id)
        )
    }

    /// The settings, the apply call and the cursor move as one simple query: one round trip, one
    /// implicit transaction, three statements. The move is its own statement after the call, so
    /// the transaction takes its lock on `consumer_shards` only once the batch has applied (a
    /// prune's SHARE lock never waits for a running batch); the call leaves its verdict in a
    /// transaction-local setting, which gates the move. A move refused after every event applied
    /// raises (`highwater.sql_sink_refused`), which takes the batch back with it.
    fn apply_and_advance(
        &self,
        (consumer, instance_id): (&str, &str),
        events: &[Event],
        advance: &Advance<'_>,
    ) -> String {
        let ids: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
        let tx_ids: Vec<String> = events.iter().map(|e| e.position().tx.to_string()).collect();
        format!(
            "{settings};
             SELECT a.failed, a.deferred, a.message,
                    set_config('highwater.sql_sink_applied', (a.failed IS NULL)::text, true)
               FROM highwater.sql_sink_apply_positions({form}, {statement}, {role}, false,
                                                       '{{{tx_ids}}}'::xid8[], '{{{ids}}}'::bigint[]) a;
             WITH moved AS ({update})
             SELECT CASE WHEN {applied} AND NOT EXISTS (SELECT FROM moved) THEN highwater.sql_sink_refused()
                    END AS refused, m.*
               FROM (SELECT) AS one LEFT JOIN moved m ON true",
            settings = self.settings(consumer, instance_id),
            form = literal::text(self.form.as_str()),
            statement = literal::text(&self.statement),
            role = literal::text_or_null(self.role.as_deref()),
            tx_ids = tx_ids.join(","),
            ids = ids.join(","),
            update = advance.inline(APPLIED),
            applied = APPLIED,
        )
    }

    /// A set statement fails for the batch as a whole: `apply` once more over one-event batches
    /// finds the event that fails (none, if the failure does not recur).
    fn find_failing(&self, events: &[Event], e: &SinkError) -> bool {
        self.form == SqlForm::Set && events.len() > 1 && !e.deferred
    }
}

/// `highwater.sql_sink_apply_positions`'s answer: the first failing event, if any.
fn reported(
    events: &[Event],
    failed: Option<i32>,
    deferred: Option<bool>,
    message: Option<String>,
) -> Result<(), SinkError> {
    let Some(index) = failed else { return Ok(()) };
    let index = (index.max(0) as usize).min(events.len() - 1);
    let deferred = deferred.unwrap_or(false) && index > 0;
    Err(SinkError { index, message: message.unwrap_or_default(), deferred })
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

    fn begin(&self, consumer: &str, instance_id: &str) -> String {
        format!("BEGIN; {}", self.settings(consumer, instance_id))
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let conn = ctx.tx.as_deref_mut().expect("transactional sink gets the cursor transaction");
        match self.apply(conn, events, false).await {
            Err(e) if self.find_failing(events, &e) => self.apply(conn, events, true).await,
            r => r,
        }
    }

    async fn deliver_and_advance(
        &self,
        conn: &mut PgConnection,
        who: (&str, &str),
        events: &[Event],
        advance: &Advance<'_>,
    ) -> Result<Applied> {
        if events.is_empty() {
            return in_transaction(self, conn, who, events, advance).await;
        }
        let sql = self.apply_and_advance(who, events, advance);
        // An error of the query itself (not one the apply reports as its row: the move's, the
        // implicit COMMIT's, a batch whose events are gone) is no event's fault.
        let rows = match sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch_all(&mut *conn).await {
            Ok(rows) => rows,
            Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some(REFUSED) => {
                return Ok(Applied::Refused);
            }
            Err(e) => return Err(e.into()),
        };
        // One row per statement: the settings', the apply's, the move's (the shard row it left,
        // all NULL when the batch did not apply).
        let [_, apply, moved] = &rows[..] else {
            return Err(Error::Internal(format!("the SQL sink's query returned {} rows, not 3", rows.len())));
        };
        let (failed, deferred, message, _): (Option<i32>, Option<bool>, Option<String>, String) =
            FromRow::from_row(apply)?;
        match reported(events, failed, deferred, message) {
            Ok(()) => Ok(Applied::Moved(shards::shard_from_row(moved)?)),
            // Nothing was committed: the move is gated on the call's success. The set form asks
            // again one event at a time, in a transaction of its own, to name the failing event,
            // or to apply the batch if the failure does not recur.
            Err(e) if self.find_failing(events, &e) => {
                let one_by_one = async |tx: &mut PgConnection| self.apply(tx, events, true).await;
                in_transaction_with(self, conn, who, one_by_one, advance).await
            }
            Err(e) => Ok(Applied::Failed(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_beyond_postgresql_s_limit_is_refused() {
        let spec =
            |t: &str| SqlSinkSpec { statement: "SELECT 1".into(), timeout: Some(t.into()), ..Default::default() };
        assert!(SqlSink::new(&spec("24d")).is_ok());
        let err = SqlSink::new(&spec("30d")).err().expect("30d is over the limit").to_string();
        assert!(err.contains("sink.sql.timeout") && err.contains("24days 20h 31m 23s 647ms"), "{err}");
    }
}
