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
//!
//! A failure at the implicit COMMIT (a deferred constraint or constraint trigger) is attributed
//! to its event too (issue 44): the batch is applied again one event at a time, each followed by
//! the checks its COMMIT would run ([`commit_check`]), so the event whose checks fail counts its
//! attempt like any failing event, and the events before it apply once.
use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use highwater_crds::{MAX_SQL_TIMEOUT, SqlForm, SqlSink as SqlSinkSpec, sql_timeout_too_long};
use sqlx::{FromRow, PgConnection, postgres::PgRow};

use super::{Applied, DeliveryContext, Sink, SinkError, in_transaction, in_transaction_with};
use highwater_store::{
    Error, Event, Result, Xid8, literal,
    shards::{self, Advance},
};

/// SQLSTATE of `highwater.sql_sink_refused` (migrations/definitions/sql_sink_refused.sql), in
/// the class `ZH` that highwater keeps for its signals to itself. Taken for a refusal only where
/// that function raises it: the move's statement, before its row (see [`Outcome`]).
const REFUSED: &str = "ZH001";

/// What [`commit_check`] sends: the deferred checks of the transaction so far, fired as COMMIT
/// would fire them, in a savepoint rolled back afterwards. Rolling back to the savepoint undoes
/// what the checks did (a trigger's append), restores the constraints' deferred mode and marks
/// the fired checks pending again (PostgreSQL's AfterTriggerEndSubXact), so the real COMMIT
/// runs them once more, exactly once in what commits.
const COMMIT_CHECK: &str = "SAVEPOINT highwater_commit_check; SET CONSTRAINTS ALL IMMEDIATE; \
                            ROLLBACK TO SAVEPOINT highwater_commit_check; RELEASE SAVEPOINT highwater_commit_check";

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

    /// Applies `events` in the open transaction on `conn` and runs the checks its COMMIT will
    /// run, so that a failure of either kind is the failure of an event: `Err` names the first
    /// event that fails, immediately or at COMMIT. `single`: the set form goes one event at a
    /// time from the start (its batch already failed as a set). On `Err` the caller rolls back.
    async fn attributed(&self, conn: &mut PgConnection, events: &[Event], single: bool) -> Result<(), SinkError> {
        if events.is_empty() {
            return Ok(());
        }
        // Where to go back to when every event applies but the checks fail: the batch, undone.
        execute(conn, "SAVEPOINT highwater_batch").await?;
        match self.apply(conn, events, single).await {
            Err(e) if !single && self.find_failing(events, &e) => self.apply(conn, events, true).await?,
            r => r?,
        }
        match commit_check(conn).await {
            Ok(()) => Ok(()),
            Err(e) if events.len() == 1 => Err(e),
            Err(_) => {
                execute(conn, "ROLLBACK TO SAVEPOINT highwater_batch").await?;
                self.one_at_a_time(conn, events).await
            }
        }
    }

    /// The batch one event at a time, each followed by its COMMIT's checks: the first event that
    /// fails either way is named (none, if the failure does not recur). A deferred check across
    /// events (a row an earlier event leaves for a later one to complete) is checked after each
    /// event here: this runs only once the batch as a whole failed at COMMIT.
    async fn one_at_a_time(&self, conn: &mut PgConnection, events: &[Event]) -> Result<(), SinkError> {
        for (index, event) in events.iter().enumerate() {
            let one = std::slice::from_ref(event);
            let applied = match self.apply(conn, one, true).await {
                Ok(()) => commit_check(conn).await,
                Err(e) => Err(e),
            };
            applied.map_err(|e| SinkError { index, ..e })?;
        }
        Ok(())
    }
}

/// Runs now the checks the transaction's COMMIT would run ([`COMMIT_CHECK`]). `Err`: one
/// failed, with PostgreSQL's message and SQLSTATE; the transaction is then aborted.
async fn commit_check(conn: &mut PgConnection) -> Result<(), SinkError> {
    sqlx::raw_sql(COMMIT_CHECK).execute(conn).await.map(drop).map_err(|e| {
        let e = fail(0, e);
        SinkError { message: format!("at COMMIT: {}", e.message), ..e }
    })
}

async fn execute(conn: &mut PgConnection, sql: &'static str) -> Result<(), SinkError> {
    sqlx::raw_sql(sql).execute(conn).await.map(drop).map_err(|e| fail(0, e))
}

/// How the batch's query ended ([`SqlSink::apply_and_advance`]), told by the rows that arrived
/// before an error: one per statement, and the last statement's before the implicit COMMIT.
enum Outcome {
    /// The settings', the apply's and the move's rows.
    Done(Vec<PgRow>),
    /// `highwater.sql_sink_refused`: its code, raised by the move's statement (after two rows).
    /// The same code at COMMIT is a user's deferred trigger raising it, not a refusal.
    Refused,
    /// The three rows arrived, then the server refused the implicit COMMIT: a deferred
    /// constraint or constraint trigger, which fires after every statement of the query.
    AtCommit(sqlx::Error),
    /// Any other error: of the query itself, no event's.
    Failed(sqlx::Error),
}

async fn run(conn: &mut PgConnection, sql: String) -> Outcome {
    let mut rows = Vec::with_capacity(3);
    let mut stream = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch(conn);
    loop {
        match stream.try_next().await {
            Ok(Some(row)) => rows.push(row),
            Ok(None) => return Outcome::Done(rows),
            Err(e) => {
                let code = e.as_database_error().and_then(|d| d.code());
                return match rows.len() {
                    2 if code.as_deref() == Some(REFUSED) => Outcome::Refused,
                    // A lost connection is not the COMMIT's checks failing.
                    3 if e.as_database_error().is_some() => Outcome::AtCommit(e),
                    _ => Outcome::Failed(e),
                };
            }
        }
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
        self.attributed(conn, events, false).await
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
        let rows = match run(conn, sql).await {
            Outcome::Done(rows) => rows,
            Outcome::Refused => return Ok(Applied::Refused),
            // Nothing was committed. The batch again, one event at a time with its COMMIT's
            // checks, in a transaction of its own: the event that fails them counts an attempt
            // like any failing event, and the events before it apply; if nothing fails, the
            // batch applies (and a COMMIT that fails again is no event's fault).
            Outcome::AtCommit(e) => {
                tracing::info!(consumer = who.0, instance = who.1, error = %highwater_store::Error::from(e),
                    "the batch failed at COMMIT: applying it one event at a time to find the event");
                let one_by_one = async |tx: &mut PgConnection| self.one_at_a_time(tx, events).await;
                return in_transaction_with(self, conn, who, one_by_one, advance).await;
            }
            // An error of the query itself (the move's, a batch whose events are gone) is no
            // event's fault.
            Outcome::Failed(e) => return Err(e.into()),
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
                let one_by_one = async |tx: &mut PgConnection| self.attributed(tx, events, true).await;
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
