//! A group pass's SQL sinks (issue 46): every member's batch and every member's cursor move in
//! one transaction, with one round trip for all the batches. A member whose batch fails, or any
//! trouble of the transaction as a whole (a refused move, a failure at COMMIT), commits nothing
//! of that member: its own pass then applies its batch and, if the failure recurs, counts the
//! attempt and names the event exactly as it does without groups (batch.rs). So a member's
//! failure is that member's attempt and nobody else's, and the group never needs a failure path
//! of its own.
use std::time::Duration;

use postgres_protocol::escape::escape_literal;
use sqlx::{Connection, FromRow, PgConnection};

use super::{Failed, Statement, apply::reported};
use crate::{
    Event, Result,
    group::{Move, advance_all},
    shards::Shard,
};

/// SQLSTATE `query_canceled`: what `statement_timeout` raises.
const TIMED_OUT: &str = "57014";

/// One consumer's part of a group's transaction.
pub struct Member<'a> {
    pub statement: &'a Statement,
    /// Its consumer and instance, as its statement sees them (`highwater.consumer`, …).
    pub who: (&'a str, &'a str),
    /// Its batch; empty for a member whose cursor only moves past events of other types.
    pub events: &'a [Event],
    pub advance: Move<'a>,
}

/// What became of a member.
#[derive(Debug)]
pub enum Verdict {
    /// Its batch applied and its cursor moved, committed: the row as the move left it.
    Moved(Shard),
    /// Nothing of it was committed; its own pass delivers it.
    Alone,
    /// Its batch ran past the group's time bound, shorter than its own timeout: nothing of it was
    /// committed, no attempt counts; its own pass delivers it, and it had better leave the group
    /// for a while (one slow consumer must not delay the others).
    Slow,
    /// Its batch failed; nothing of it was committed. `whole`: a set statement failed for the
    /// batch as a whole, the failing event is still to be found ([`super::attribute_and_advance`]).
    Failed { failed: Failed, whole: bool },
}

/// Creates, outside any transaction, the session's functions of every distinct statement of
/// `statements` in one statement (as [`super::prepare`] does for one). Per statement: whether it
/// is ready; one that is not goes alone, and its own pass reports why.
pub async fn prepare_all(conn: &mut PgConnection, statements: &[&Statement]) -> Result<Vec<bool>> {
    let forms: Vec<&str> = statements.iter().map(|s| s.form.as_str()).collect();
    let texts: Vec<&str> = statements.iter().map(|s| s.statement.as_str()).collect();
    let problems: Vec<(i64, Option<String>)> = sqlx::query_as(
        "SELECT n, highwater.sql_sink_prepare(f, s) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(f, s, n)",
    )
    .bind(&forms)
    .bind(&texts)
    .fetch_all(conn)
    .await?;
    let mut ready = vec![false; statements.len()];
    for (n, problem) in problems {
        if let Some(r) = ready.get_mut(n as usize - 1) {
            *r = problem.is_none();
        }
    }
    Ok(ready)
}

/// Applies every member's batch and moves every cursor, committed together; see the module's
/// comment for what a member that fails becomes. `conn` is in no transaction and holds every
/// member's claim; each statement's functions are prepared on it ([`prepare_all`]).
/// `bound`: the longest any member's batch may run in the group (its `statement_timeout` there,
/// when shorter than its own).
pub async fn apply_all(conn: &mut PgConnection, members: &[Member<'_>], bound: Duration) -> Result<Vec<Verdict>> {
    // Every member's failure, found by its apply; a member whose apply failed stays failed
    // whatever becomes of the others.
    let mut failures: Vec<Option<Failed>> = members.iter().map(|_| None).collect();
    let alone = |failures: Vec<Option<Failed>>, slow: &[bool]| -> Vec<Verdict> {
        members
            .iter()
            .zip(failures)
            .zip(slow)
            .map(
                |((m, f), slow)| if *slow { Verdict::Slow } else { verdict_of_failure(m, f).unwrap_or(Verdict::Alone) },
            )
            .collect()
    };
    let mut tx = conn.begin().await?;
    let batches: Vec<usize> = (0..members.len()).filter(|&i| !members[i].events.is_empty()).collect();
    let mut applied = vec![true; members.len()];
    let mut slow = vec![false; members.len()];
    if !batches.is_empty() {
        let bound_ms = bound.as_millis() as u64;
        let mut sql: String = batches.iter().map(|&i| batch_statements(&members[i], bound_ms)).collect();
        // The moves and the COMMIT under the longest of the members' own timeouts, not under the
        // last batch's bound.
        let own = members.iter().map(|m| m.statement.timeout_ms).max().unwrap_or(0);
        sql.push_str(&format!("SELECT set_config('statement_timeout', '{own}', true);"));
        let rows = match sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch_all(&mut *tx).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "a group's batches failed together: every member goes alone");
                return Ok(alone(failures, &slow));
            }
        };
        // Two rows per batch (its settings', its apply's), then the timeout's.
        if rows.len() != 2 * batches.len() + 1 {
            return Ok(alone(failures, &slow));
        }
        for (k, &i) in batches.iter().enumerate() {
            let (failed, deferred, message): (Option<i32>, Option<bool>, Option<String>) =
                FromRow::from_row(&rows[2 * k + 1])?;
            if let Err(f) = reported(members[i].events, failed, deferred, message) {
                applied[i] = false;
                if bound_ms < members[i].statement.timeout_ms && f.message.ends_with(&format!("(SQLSTATE {TIMED_OUT})"))
                {
                    slow[i] = true;
                } else {
                    failures[i] = Some(f);
                }
            }
        }
    }
    let moves: Vec<Move<'_>> =
        members.iter().zip(&applied).filter(|(_, ok)| **ok).map(|(m, _)| m.advance.clone()).collect();
    let moved = match advance_all(&mut tx, &moves).await {
        Ok(moved) if moved.len() == moves.len() => moved,
        // A shard changed under the pass (an operator's command): nothing of the group commits;
        // each member's own pass sees the change.
        Ok(_) => return Ok(alone(failures, &slow)),
        Err(e) => {
            tracing::debug!(error = %e, "a group's cursor moves failed: every member goes alone");
            return Ok(alone(failures, &slow));
        }
    };
    if let Err(e) = tx.commit().await {
        // A deferred check failed at COMMIT: the members' own passes find the event.
        tracing::debug!(error = %e, "a group's COMMIT failed: every member goes alone");
        return Ok(alone(failures, &slow));
    }
    let mut moved: std::collections::HashMap<(String, String), Shard> =
        moved.into_iter().map(|s| ((s.consumer.clone(), s.instance_id.clone()), s)).collect();
    Ok(members
        .iter()
        .zip(failures)
        .zip(slow)
        .map(|((m, f), slow)| match moved.remove(&(m.who.0.to_owned(), m.who.1.to_owned())) {
            Some(row) => Verdict::Moved(row),
            None if slow => Verdict::Slow,
            None => verdict_of_failure(m, f).unwrap_or(Verdict::Alone),
        })
        .collect())
}

fn verdict_of_failure(m: &Member<'_>, failed: Option<Failed>) -> Option<Verdict> {
    failed.map(|failed| Verdict::Failed { whole: m.statement.find_failing(m.events, &failed), failed })
}

/// A member's settings and its apply call, as statements of the group's simple query (values as
/// literals, escaped as libpq escapes them, numbers as digits; see batch.rs).
///
/// The bound: PostgreSQL arms a statement's timer with `statement_timeout` as it stands when the
/// statement starts, and does not re-arm it when the setting changes during the statement. So the
/// settings statement sets the group's bound, which the apply statement's timer takes; the apply
/// statement then sets the consumer's own timeout back before its batch runs (the lateral call
/// reads that value, so it runs after), and the consumer's statement sees its own settings.
fn batch_statements(m: &Member<'_>, bound_ms: u64) -> String {
    let s = m.statement;
    let ids: Vec<String> = m.events.iter().map(|e| e.id.to_string()).collect();
    let tx_ids: Vec<String> = m.events.iter().map(|e| e.position().tx.to_string()).collect();
    format!(
        "{settings};
         SELECT a.failed, a.deferred, a.message
           FROM (SELECT set_config('statement_timeout', '{own}', true) AS own) o
          CROSS JOIN LATERAL highwater.sql_sink_apply_positions({form}, {statement}, {role}, o.own IS NULL,
                                                   '{{{tx_ids}}}'::xid8[], '{{{ids}}}'::bigint[]) a;\n",
        settings = s.settings_timeout(m.who, s.timeout_ms.min(bound_ms)),
        own = s.timeout_ms,
        form = escape_literal(s.form.as_str()),
        statement = escape_literal(&s.statement),
        role = s.role.as_deref().map_or_else(|| "NULL".to_owned(), escape_literal),
        tx_ids = tx_ids.join(","),
        ids = ids.join(","),
    )
}
