//! The SQL sink's statements: the consumer's statement, applied in the transaction that moves the
//! cursor. The engine's SQL sink calls these with values (its statement, the batch's events, the
//! cursor move); no SQL text is assembled outside this module.
//!
//! A batch costs one round trip besides its read, whatever its size, and the first batch of a
//! claim one more: [`prepare`] (`highwater.sql_sink_prepare`) before (a no-op once the session
//! has the statement's functions; the pass skips it while it keeps the claim's connection); then
//! [`apply_and_advance`]: one simple query whose statements share one implicit transaction (the
//! transaction-local settings, one statement that calls `highwater.sql_sink_apply_positions`
//! naming the batch by its events' positions, which reads the events and runs the statement per
//! event, or once over the batch for `form: set`, server-side, then the cursor move if every
//! event applied). A failure's handling (finding the failing event, applying the events before
//! it) opens a transaction of its own ([`apply`], [`begin`]).
//!
//! A failure at the implicit COMMIT (a deferred constraint or constraint trigger) is attributed
//! to its event too (issue 44): the batch is applied again one event at a time, each followed by
//! the checks its COMMIT would run (apply.rs), so the event whose checks fail counts its attempt
//! like any failing event, and the events before it apply once.
use std::time::Duration;

use highwater_crds::{MAX_SQL_TIMEOUT, SqlForm, SqlSink as SqlSinkSpec, sql_timeout_too_long};
use postgres_protocol::escape::escape_literal;
use sqlx::{Connection, PgConnection, Postgres, Transaction};

use crate::{Error, Event, Result, shards::Shard};

mod apply;
mod batch;
pub mod group;

pub use apply::apply;
pub use batch::{apply_and_advance, attribute_and_advance};

/// A SQL sink's statement and how it runs: what every call of this module takes.
#[derive(Clone, Debug)]
pub struct Statement {
    statement: String,
    form: SqlForm,
    role: Option<String>,
    timeout_ms: u64,
    /// The consumer's `eventVersions` as `highwater.upcast_for` takes it: set as the
    /// transaction-local `highwater.event_versions`, which the session's generated code reads
    /// (sql_sink_prepare.sql). `None`: the setting stays empty, payloads as stored.
    pub event_versions: Option<serde_json::Value>,
}

impl Statement {
    /// The statement a consumer's `sink.sql` declares, its timeout checked.
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
        Ok(Statement {
            statement: spec.statement.clone(),
            form: spec.form,
            role: spec.role.clone(),
            timeout_ms: timeout.as_millis() as u64,
            event_versions: None,
        })
    }

    /// The transaction-local settings, as one statement. `statement_timeout` must be set before
    /// the statement it limits starts, hence a statement of their own ahead of it;
    /// `set_config(..., true)` is SET LOCAL. It cannot fail: the timeout was checked against
    /// PostgreSQL's limit when the statement was built. Literals, not parameters: it travels in
    /// a simple query (with `BEGIN`, or ahead of the batch), escaped as libpq escapes them.
    fn settings(&self, who: (&str, &str)) -> String {
        self.settings_timeout(who, self.timeout_ms)
    }

    /// [`Self::settings`] with `statement_timeout` at `timeout_ms` (a group pass's bound, at
    /// most the statement's own).
    fn settings_timeout(&self, (consumer, instance_id): (&str, &str), timeout_ms: u64) -> String {
        let versions = match &self.event_versions {
            Some(v) => format!(", set_config('highwater.event_versions', {}, true)", escape_literal(&v.to_string())),
            None => String::new(),
        };
        format!(
            "SELECT set_config('statement_timeout', '{}', true), set_config('highwater.consumer', {}, true), \
             set_config('highwater.instance_id', {}, true){versions}",
            timeout_ms,
            escape_literal(consumer),
            escape_literal(instance_id)
        )
    }

    /// What tells two statements' session functions apart (`sql_sink_prepare`'s arguments): a
    /// session that prepared one has the other's too.
    pub fn group_key(&self) -> (&'static str, String) {
        (self.form.as_str(), self.statement.clone())
    }

    /// A set statement fails for the batch as a whole: applying once more over one-event
    /// batches finds the event that fails (none, if the failure does not recur).
    pub(crate) fn find_failing(&self, events: &[Event], e: &Failed) -> bool {
        self.form == SqlForm::Set && events.len() > 1 && !e.deferred
    }
}

/// The first event that could not be applied; every event before `index` was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub index: usize,
    pub message: String,
    /// The batch stopped at `index` for a reason that is not that event's fault (it ran into
    /// its time limit): apply from it again without counting a failed attempt. Only with
    /// `index > 0`, so every call makes progress.
    pub deferred: bool,
}

impl Failed {
    fn at(index: usize, e: sqlx::Error) -> Self {
        let message = match e.as_database_error() {
            Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().unwrap_or_default()),
            None => e.to_string(),
        };
        Failed { index, message, deferred: false }
    }
}

/// What [`apply_and_advance`] did.
#[derive(Debug)]
pub enum Applied {
    /// Every event applied and the cursor moved, committed together: the shard row as the move
    /// left it.
    Moved(Shard),
    /// The move was refused (the shard changed under the pass); nothing was committed.
    Refused,
    /// An event failed; nothing was committed.
    Failed(Failed),
}

/// Creates the session's functions for `statement` (`highwater.sql_sink_prepare`) on `conn`,
/// outside any transaction: catalog writes that would otherwise take a transaction id for the
/// whole delivery. `Err`: the statement cannot run, PostgreSQL's reason (the batch's first
/// event's failure).
pub async fn prepare(conn: &mut PgConnection, statement: &Statement) -> std::result::Result<(), Failed> {
    let problem: Option<String> = sqlx::query_scalar("SELECT highwater.sql_sink_prepare($1, $2)")
        .bind(statement.form.as_str())
        .bind(&statement.statement)
        .fetch_one(conn)
        .await
        .map_err(|e| Failed::at(0, e))?;
    problem.map_or(Ok(()), |message| Err(Failed { index: 0, message, deferred: false }))
}

/// Opens the cursor transaction for `statement` on `conn`: `BEGIN` and its settings, in one
/// round trip. `who`: the consumer and the instance, as the statement sees them
/// (`highwater.consumer`, `highwater.instance_id`).
pub async fn begin<'c>(
    conn: &'c mut PgConnection,
    statement: &Statement,
    who: (&str, &str),
) -> Result<Transaction<'c, Postgres>> {
    Ok(conn.begin_with(sqlx::AssertSqlSafe(format!("BEGIN; {}", statement.settings(who)))).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_beyond_postgresql_s_limit_is_refused() {
        let spec =
            |t: &str| SqlSinkSpec { statement: "SELECT 1".into(), timeout: Some(t.into()), ..Default::default() };
        assert!(Statement::new(&spec("24d")).is_ok());
        let err = Statement::new(&spec("30d")).expect_err("30d is over the limit").to_string();
        assert!(err.contains("sink.sql.timeout") && err.contains("24days 20h 31m 23s 647ms"), "{err}");
    }

    /// The settings' values are literals in a simple query: quotes and backslashes must stay
    /// inside them whatever `standard_conforming_strings` says.
    #[test]
    fn the_settings_escape_their_values() {
        let mut s = Statement::new(&SqlSinkSpec { statement: "SELECT 1".into(), ..Default::default() }).unwrap();
        s.event_versions = Some(serde_json::json!({"o'k": "a\\b"}));
        let sql = s.settings(("it's", r"a\b"));
        assert!(sql.contains("set_config('statement_timeout', '30000', true)"), "{sql}");
        assert!(sql.contains("set_config('highwater.consumer', 'it''s', true)"), "{sql}");
        assert!(sql.contains(r"set_config('highwater.instance_id',  E'a\\b', true)"), "{sql}");
        assert!(sql.contains(r#"set_config('highwater.event_versions',  E'{"o''k":"a\\\\b"}', true)"#), "{sql}");
    }
}
