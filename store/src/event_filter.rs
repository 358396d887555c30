//! `spec.filter` (issue 49): a SQL boolean expression over the event, evaluated in the read of
//! an external sink's batch, so that the events it rejects never leave the database.
//!
//! Checked when the consumer is applied, by PostgreSQL itself: the expression becomes the WHERE
//! clause of a temporary view over `highwater.events` (in a transaction that is rolled back),
//! which parses, resolves and type-checks it (a boolean, no aggregate, no window) without running
//! it; then the view's query tree must call no volatile function or operator (`random()`,
//! `nextval()`, `clock_timestamp()`, a user function that writes) and no table but the events:
//! a filter sees the event only, it changes nothing, and the same event is judged the same way on
//! every read.
use sqlx::{
    PgConnection, PgPool,
    postgres::{PgDatabaseError, PgErrorPosition},
};

use crate::{
    Error, Result,
    events::event_arrays,
    shards::{self, Batch, Shard, ShardRead},
};

/// The view's text before the expression; the expression starts on a line of its own, so that
/// PostgreSQL's position of an error in it is a line and column of the filter.
const VIEW_HEAD: &str = "CREATE TEMPORARY VIEW highwater_filter_check AS SELECT e.id FROM highwater.events e WHERE (\n";

/// Refuses `filter` unless it is a boolean expression over the event without side effects.
pub async fn check(pool: &PgPool, consumer: &str, source: &str, filter: &str) -> Result<()> {
    let fix = "write one boolean expression over payload, metadata, stream_type, stream_id, tenant_id, \
               event_type (e.g. filter: \"(payload->>'total')::numeric > 1000\"), with immutable or stable \
               functions only";
    if let Err(problem) = one_expression(filter) {
        return Err(
            Error::refused(format!("consumer {consumer:?} ({source}): filter is refused: {problem}")).with_fix(fix)
        );
    }
    let mut tx = pool.begin().await?;
    // One statement (the extended protocol refuses several), not kept prepared.
    let created =
        sqlx::query(sqlx::AssertSqlSafe(format!("{VIEW_HEAD}{filter}\n)"))).persistent(false).execute(&mut *tx).await;
    if let Err(e) = created {
        let at = e
            .as_database_error()
            .and_then(|d| d.try_downcast_ref::<PgDatabaseError>())
            .and_then(|pg| match pg.position() {
                Some(PgErrorPosition::Original(at)) => Some(at),
                _ => None,
            })
            .and_then(|at| position(filter, at))
            .map(|p| format!(", at {p}"))
            .unwrap_or_default();
        let msg = e.as_database_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
        drop(tx);
        return Err(
            Error::refused(format!("consumer {consumer:?} ({source}): filter is refused{at}: {msg}")).with_fix(fix)
        );
    }
    // The view's query tree names each function it calls (`:funcid`, and `:opfuncid` for an
    // operator's) and each relation it reads (`:relid`). Not pg_depend: PostgreSQL records no
    // dependency on its built-in objects, so `random()` would pass unseen.
    let refused: Vec<Option<String>> = sqlx::query_scalar(
        "WITH node AS (
            SELECT ev_action::text AS tree FROM pg_rewrite
             WHERE ev_class = 'pg_temp.highwater_filter_check'::regclass),
         funcs AS (
            SELECT DISTINCT m[1]::oid AS oid FROM node, regexp_matches(node.tree, ':(?:funcid|opfuncid) (\\d+)', 'g') m),
         rels AS (
            SELECT DISTINCT m[1]::oid AS oid FROM node, regexp_matches(node.tree, ':relid (\\d+)', 'g') m)
         SELECT format('function %s is volatile', p.oid::regprocedure)
           FROM funcs JOIN pg_proc p ON p.oid = funcs.oid WHERE p.provolatile = 'v'
         UNION
         SELECT format('it reads %s: a filter sees the event only', rels.oid::regclass)
           FROM rels
          WHERE rels.oid NOT IN ('highwater.events'::regclass, 'pg_temp.highwater_filter_check'::regclass)
         ORDER BY 1",
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.rollback().await?;
    let refused: Vec<String> = refused.into_iter().flatten().collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(Error::refused(format!("consumer {consumer:?} ({source}): filter is refused: {}", refused.join("; ")))
        .with_fix(fix))
}

/// The filter is written into the read's WHERE clause between parentheses: it must not close
/// them (`true) UNION ALL SELECT …`), so no `)` may come before its `(` outside string literals,
/// quoted names and comments. `$` (dollar quoting, parameters) has no use in a filter and would
/// hide parentheses from this count: refused.
fn one_expression(filter: &str) -> std::result::Result<(), String> {
    let mut depth = 0i32;
    let mut chars = filter.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                // To the closing quote; a doubled quote inside is one quote character.
                loop {
                    match chars.next() {
                        Some(q) if q == c => {
                            if chars.peek() == Some(&c) {
                                chars.next();
                            } else {
                                break;
                            }
                        }
                        Some(_) => {}
                        None => return Err(format!("a {c} is not closed")),
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                loop {
                    match chars.next() {
                        Some('/') if prev == '*' => break,
                        Some(n) => prev = n,
                        None => return Err("a /* comment is not closed".to_owned()),
                    }
                }
            }
            '$' => {
                return Err("`$` has no use in a filter (no parameters, no dollar quoting): write '…' literals".into());
            }
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("a `)` closes a parenthesis the filter did not open".to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `line L, column C` in the filter of PostgreSQL's character position `at` (from 1) in the view.
fn position(filter: &str, at: usize) -> Option<String> {
    let head = VIEW_HEAD.chars().count();
    let at = at.checked_sub(head + 1)?;
    // Past the expression: PostgreSQL met the wrapper's closing parenthesis, the text ended early.
    if at >= filter.chars().count() {
        return Some("the end of the expression".to_owned());
    }
    let before: String = filter.chars().take(at).collect();
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some(format!("line {line}, column {column}"))
}

/// [`shards::load_and_read`] for a consumer with a filter: the shard row, then up to `limit` of
/// the events after its cursor below the fence for which `filter` is true (with its types, its
/// partition, up to its barrier, past the events its bootstrap saw). A short batch holds every
/// such event below the fence, so the pass may move the cursor to the head, as without a filter.
/// Two statements (the row, then the read) under the shard's claim.
pub async fn load_and_read(conn: &mut PgConnection, r: &ShardRead<'_>, filter: &str) -> Result<Option<(Shard, Batch)>> {
    let ShardRead { consumer, instance, types, limit, ref bodies, waiting } = *r;
    let Some(shard) = shards::load(conn, consumer, instance).await? else { return Ok(None) };
    let due = shard.status.delivers() && (waiting || shard.retry_in_ms.is_none_or(|ms| ms <= 0));
    let sql = format!(
        "WITH {s}
         SELECT s.next AS next_xid, h.tx_id AS head_tx, h.id AS head_id, b.*
           FROM s
           {head}
           CROSS JOIN LATERAL (
                SELECT {arrays} FROM (
                    SELECT * FROM highwater.events e
                     WHERE (e.tx_id, e.id) > ($1, $2)
                       AND e.tx_id >= $1
                       AND e.tx_id < {fence}
                       AND (cardinality($3::text[]) = 0 OR e.event_type = ANY ($3))
                       AND NOT (e.id = ANY ($5))
                       AND ($6::int IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, $8) = $6)
                       AND ($9::xid8 IS NULL OR (e.tx_id, e.id) <= ($9, $10))
                       AND (
{filter}
                       )
                     ORDER BY e.tx_id, e.id
                     LIMIT $4) e) b",
        s = shards::fence_cte(),
        head = shards::HEAD_LATERAL,
        fence = fence!(),
        arrays = event_arrays(bodies),
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(shard.cursor.xid8())
        .bind(shard.cursor.id)
        .bind(types)
        .bind(if due { limit } else { 0 })
        .bind(&shard.skip)
        .bind(shard.partition.map(|p| p.0))
        // `$7` of the upcasting form of event_arrays; the other forms do not read it (NULL).
        .bind(bodies.want().map(|want| sqlx::types::Json(want.clone())))
        .bind(shard.partition.map(|p| p.1))
        .bind(shard.barrier.map(|b| b.xid8()))
        .bind(shard.barrier.map(|b| b.id))
        .fetch_one(conn)
        .await?;
    let mut batch = shards::batch_from_row(&row)?;
    if let (Some(b), Some(h)) = (shard.barrier, batch.head)
        && h > b
    {
        batch.head = Some(b);
    }
    Ok(Some((shard, batch)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_cannot_close_the_read_s_parenthesis() {
        assert!(one_expression("(payload->>'total')::numeric > 1000 AND stream_id = ')'").is_ok());
        assert!(one_expression("\"odd)name\" = 'it''s (' -- a comment )\n AND true /* ) */").is_ok());
        assert!(one_expression("true) UNION ALL SELECT * FROM highwater.events WHERE (true").is_err());
        assert!(one_expression("stream_id = $$($$) OR (true").is_err());
        assert!(one_expression("stream_id = 'open").is_err());
        assert_eq!(position("a\nbc", VIEW_HEAD.chars().count() + 4).as_deref(), Some("line 2, column 2"));
        assert_eq!(position("ab", VIEW_HEAD.chars().count() + 4).as_deref(), Some("the end of the expression"));
    }
}
