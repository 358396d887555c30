//! Applying a SQL sink's statement to events in an open transaction, so that every failure, at
//! once or at COMMIT, is the failure of one named event.
use sqlx::PgConnection;

use super::{Failed, Statement};
use crate::{Event, Xid8};

type Applied = std::result::Result<(), Failed>;

/// One call of `highwater.sql_sink_apply_positions`, the events named by their `(tx_id, id)`
/// positions (the server reads them itself). `$4`: one event at a time (the set form's batch
/// already failed as a set).
const APPLY_POSITIONS: &str =
    "SELECT failed, deferred, message FROM highwater.sql_sink_apply_positions($1, $2, $3, $4, $5, $6)";

/// What [`commit_check`] sends: the deferred checks of the transaction so far, fired as COMMIT
/// would fire them, in a savepoint rolled back afterwards. Rolling back to the savepoint undoes
/// what the checks did (a trigger's append), restores the constraints' deferred mode and marks
/// the fired checks pending again (PostgreSQL's AfterTriggerEndSubXact), so the real COMMIT
/// runs them once more, exactly once in what commits.
const COMMIT_CHECK: &str = "SAVEPOINT highwater_commit_check; SET CONSTRAINTS ALL IMMEDIATE; \
                            ROLLBACK TO SAVEPOINT highwater_commit_check; RELEASE SAVEPOINT highwater_commit_check";

/// Where [`attributed`] goes back to when every event applies but the checks fail: the batch,
/// undone.
const BATCH_SAVEPOINT: &str = "SAVEPOINT highwater_batch";
const BATCH_ROLLBACK: &str = "ROLLBACK TO SAVEPOINT highwater_batch";

/// Applies `events` in the transaction open on `conn` (opened with [`super::begin`]) and runs
/// the checks its COMMIT will run: `Err` names the first event that fails, immediately or at
/// COMMIT. On `Err` the caller rolls back; a failed call may leave anything behind.
pub async fn apply(conn: &mut PgConnection, statement: &Statement, events: &[Event]) -> Applied {
    attributed(conn, statement, events, false).await
}

/// [`apply`]; `single`: the set form goes one event at a time from the start (its batch already
/// failed as a set).
pub(super) async fn attributed(conn: &mut PgConnection, s: &Statement, events: &[Event], single: bool) -> Applied {
    if events.is_empty() {
        return Ok(());
    }
    execute(conn, BATCH_SAVEPOINT).await?;
    match positions(conn, s, events, single).await {
        Err(e) if !single && s.find_failing(events, &e) => positions(conn, s, events, true).await?,
        r => r?,
    }
    match commit_check(conn).await {
        Ok(()) => Ok(()),
        Err(e) if events.len() == 1 => Err(e),
        Err(_) => {
            execute(conn, BATCH_ROLLBACK).await?;
            one_at_a_time(conn, s, events).await
        }
    }
}

/// The batch one event at a time, each followed by its COMMIT's checks: the first event that
/// fails either way is named (none, if the failure does not recur). A deferred check across
/// events (a row an earlier event leaves for a later one to complete) is checked after each
/// event here: this runs only once the batch as a whole failed at COMMIT.
pub(super) async fn one_at_a_time(conn: &mut PgConnection, s: &Statement, events: &[Event]) -> Applied {
    for (index, event) in events.iter().enumerate() {
        let one = std::slice::from_ref(event);
        let applied = match positions(conn, s, one, true).await {
            Ok(()) => commit_check(conn).await,
            Err(e) => Err(e),
        };
        applied.map_err(|e| Failed { index, ..e })?;
    }
    Ok(())
}

/// One call of [`APPLY_POSITIONS`] in the open transaction on `conn`: `Ok` when every event
/// applied; otherwise nothing of this call is applied and the error names the first failing
/// event.
async fn positions(conn: &mut PgConnection, s: &Statement, events: &[Event], single: bool) -> Applied {
    if events.is_empty() {
        return Ok(());
    }
    let tx_ids: Vec<Xid8> = events.iter().map(|e| e.position().xid8()).collect();
    let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
    let (failed, deferred, message): (Option<i32>, Option<bool>, Option<String>) = sqlx::query_as(APPLY_POSITIONS)
        .bind(s.form.as_str())
        .bind(&s.statement)
        .bind(&s.role)
        .bind(single)
        .bind(tx_ids)
        .bind(ids)
        .fetch_one(conn)
        .await
        .map_err(|e| Failed::at(0, e))?;
    reported(events, failed, deferred, message)
}

/// Runs now the checks the transaction's COMMIT would run ([`COMMIT_CHECK`]). `Err`: one
/// failed, with PostgreSQL's message and SQLSTATE; the transaction is then aborted.
async fn commit_check(conn: &mut PgConnection) -> Applied {
    sqlx::raw_sql(COMMIT_CHECK).execute(conn).await.map(drop).map_err(|e| {
        let e = Failed::at(0, e);
        Failed { message: format!("at COMMIT: {}", e.message), ..e }
    })
}

async fn execute(conn: &mut PgConnection, sql: &'static str) -> Applied {
    sqlx::raw_sql(sql).execute(conn).await.map(drop).map_err(|e| Failed::at(0, e))
}

/// `highwater.sql_sink_apply_positions`'s answer: the first failing event, if any.
pub(super) fn reported(
    events: &[Event],
    failed: Option<i32>,
    deferred: Option<bool>,
    message: Option<String>,
) -> Applied {
    let Some(index) = failed else { return Ok(()) };
    let index = (index.max(0) as usize).min(events.len() - 1);
    let deferred = deferred.unwrap_or(false) && index > 0;
    Err(Failed { index, message: message.unwrap_or_default(), deferred })
}
