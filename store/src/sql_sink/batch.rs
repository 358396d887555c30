//! A batch and its cursor move in one round trip: the SQL sink's "apply, then advance" unit.
use futures::TryStreamExt;
use postgres_protocol::escape::escape_literal;
use sqlx::{FromRow, PgConnection, postgres::PgRow};

use super::{
    Applied, Failed, Statement,
    apply::{attributed, one_at_a_time, reported},
    begin,
};
use crate::{
    Error, Event, Result,
    shards::{Advance, shard_from_row},
};

/// SQLSTATE of `highwater.sql_sink_refused` (migrations/definitions/sql_sink_refused.sql), in
/// the class `ZH` that highwater keeps for its signals to itself. Taken for a refusal only where
/// that function raises it: the move's statement, before its row (see [`Outcome`]).
const REFUSED: &str = "ZH001";

/// Every event of the batch applied, as the apply statement of [`batch_query`] left it for the
/// statements after it.
const APPLIED: &str = "current_setting('highwater.sql_sink_applied') = 'true'";

/// Applies `events` with `statement` and, when every one applied, moves the cursor (`advance`),
/// atomically, on `conn`, which is in no transaction. Nothing is committed unless the answer is
/// [`Applied::Moved`]. `who`: the consumer and the instance. An error of the transaction itself
/// (its BEGIN, the move, a COMMIT whose failure no event's checks reproduce) is no event's
/// fault: `Err`, for the caller to retry without counting an attempt against any event, because
/// blaming the first event could park or kill an event that applied. When the batch's COMMIT
/// fails, each event's deferred checks run on their own and the event whose checks fail is
/// blamed.
pub async fn apply_and_advance(
    conn: &mut PgConnection,
    statement: &Statement,
    who: (&str, &str),
    events: &[Event],
    advance: &Advance<'_>,
) -> Result<Applied> {
    if events.is_empty() {
        let none = async |tx: &mut PgConnection| attributed(tx, statement, events, false).await;
        return in_transaction(conn, statement, who, none, advance).await;
    }
    let rows = match run(conn, batch_query(statement, who, events, advance)).await {
        Outcome::Done(rows) => rows,
        Outcome::Refused => return Ok(Applied::Refused),
        // Nothing was committed. The batch again, one event at a time with its COMMIT's
        // checks, in a transaction of its own: the event that fails them counts an attempt
        // like any failing event, and the events before it apply; if nothing fails, the
        // batch applies (and a COMMIT that fails again is no event's fault).
        Outcome::AtCommit(e) => {
            tracing::info!(consumer = who.0, instance = who.1, error = %Error::from(e),
                "the batch failed at COMMIT: applying it one event at a time to find the event");
            let one_by_one = async |tx: &mut PgConnection| one_at_a_time(tx, statement, events).await;
            return in_transaction(conn, statement, who, one_by_one, advance).await;
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
    let (failed, deferred, message, _): (Option<i32>, Option<bool>, Option<String>, String) = FromRow::from_row(apply)?;
    match reported(events, failed, deferred, message) {
        Ok(()) => Ok(Applied::Moved(shard_from_row(moved)?)),
        // Nothing was committed: the move is gated on the call's success. The set form asks
        // again one event at a time, in a transaction of its own, to name the failing event,
        // or to apply the batch if the failure does not recur.
        Err(e) if statement.find_failing(events, &e) => {
            let one_by_one = async |tx: &mut PgConnection| attributed(tx, statement, events, true).await;
            in_transaction(conn, statement, who, one_by_one, advance).await
        }
        Err(e) => Ok(Applied::Failed(e)),
    }
}

/// For a batch whose set statement failed as a whole (in a group pass, `super::group`): applies
/// it again one event at a time, in a transaction of its own, to name the failing event, or to
/// apply the batch and move the cursor if the failure does not recur (as [`apply_and_advance`]
/// does after its own batch failed so).
pub async fn attribute_and_advance(
    conn: &mut PgConnection,
    statement: &Statement,
    who: (&str, &str),
    events: &[Event],
    advance: &Advance<'_>,
) -> Result<Applied> {
    let one_by_one = async |tx: &mut PgConnection| attributed(tx, statement, events, true).await;
    in_transaction(conn, statement, who, one_by_one, advance).await
}

/// The settings, the apply call and the cursor move as one simple query: one round trip, one
/// implicit transaction, three statements. The move is its own statement after the call, so
/// the transaction takes its lock on `consumer_shards` only once the batch has applied (a
/// prune's SHARE lock never waits for a running batch); the call leaves its verdict in a
/// transaction-local setting, which gates the move. A move refused after every event applied
/// raises (`highwater.sql_sink_refused`), which takes the batch back with it. A simple query
/// has no parameters: its values are literals (escaped as libpq escapes them, numbers as
/// digits).
fn batch_query(s: &Statement, who: (&str, &str), events: &[Event], advance: &Advance<'_>) -> String {
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
        settings = s.settings(who),
        form = escape_literal(s.form.as_str()),
        statement = escape_literal(&s.statement),
        role = s.role.as_deref().map_or_else(|| "NULL".to_owned(), escape_literal),
        tx_ids = tx_ids.join(","),
        ids = ids.join(","),
        update = advance.inline(APPLIED),
        applied = APPLIED,
    )
}

/// How the batch's query ended ([`batch_query`]), told by the rows that arrived before an
/// error: one per statement, and the last statement's before the implicit COMMIT.
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

/// The batch as a transaction of its own, for the retries that look for the failing event: a
/// transaction opened with the statement's settings ([`begin`]), `apply`, the move, commit
/// (rollback if either failed or was refused).
async fn in_transaction(
    conn: &mut PgConnection,
    statement: &Statement,
    who: (&str, &str),
    apply: impl AsyncFnOnce(&mut PgConnection) -> std::result::Result<(), Failed>,
    advance: &Advance<'_>,
) -> Result<Applied> {
    let mut tx = begin(conn, statement, who).await?;
    if let Err(e) = apply(&mut tx).await {
        tx.rollback().await?;
        return Ok(Applied::Failed(e));
    }
    let Some(moved) = advance.run(&mut tx).await? else {
        tx.rollback().await?;
        return Ok(Applied::Refused);
    };
    tx.commit().await?;
    Ok(Applied::Moved(moved))
}
