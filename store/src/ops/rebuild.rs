//! Rebuilding a read model (`consumer rebuild`) and bootstrapping one from the application's
//! tables (`spec.sink.sql.bootstrap`). Both change the read model and the cursor in one
//! transaction, so a reader sees the old read model or the new one being built, never a mix.
//! They do not wait for the shard's claim (a dispatcher draining a backlog keeps it from batch to
//! batch): a dispatcher's batch in flight either committed before their cursor update, which is
//! then conditional on the cursor they read first and retried, or fails its own conditional
//! cursor update afterwards and rolls back with its sink's writes.
use std::fmt;

use highwater_crds::{ConsumerSpec, Delivery, SHARED_INSTANCE, SqlSink};
use sqlx::{Connection, PgConnection, PgPool, types::Json};

use super::audit::{self, Audit};
use crate::{Error, Position, Result, Xid8, notify, shards::Status};

/// A rebuild or bootstrap whose shard's cursor moved under it (a dispatcher's batch committed
/// meanwhile) is tried again this many times.
const RETRIES: u32 = 50;

/// What a rebuild did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Rebuilt {
    /// Cursor rewound to the start after `reset`: `total` events to replay, complete at `target`.
    Replaying { total: i64, target: Option<Position> },
    /// Events were pruned: `reset` and `bootstrap` ran in one snapshot, the cursor placed after it.
    Bootstrapped(Bootstrapped),
}

/// Where a bootstrap left the cursor.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Bootstrapped {
    /// `xmin` of the bootstrap's snapshot: delivery resumes at the first event stamped there.
    pub snapshot_xmin: Xid8,
    pub snapshot_xmax: Xid8,
    /// Events at or above `xmin` that the snapshot saw (never delivered).
    pub seen_in_window: usize,
}

impl fmt::Display for Rebuilt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rebuilt::Replaying { total, .. } => write!(f, "rebuild started: {total} events to replay"),
            Rebuilt::Bootstrapped(b) => write!(
                f,
                "bootstrapped from the application's tables (snapshot {}..{}, {} events of its window already in it); \
                 delivery resumes after it",
                b.snapshot_xmin, b.snapshot_xmax, b.seen_in_window
            ),
        }
    }
}

async fn sql_spec(pool: &PgPool, name: &str, verb: &str) -> Result<(ConsumerSpec, SqlSink)> {
    let row: Option<(Json<ConsumerSpec>,)> =
        sqlx::query_as("SELECT spec FROM highwater.consumers WHERE name = $1").bind(name).fetch_optional(pool).await?;
    let Some((Json(spec),)) = row else {
        return Err(Error::no_consumer(name));
    };
    if spec.delivery != Delivery::Shared {
        return Err(Error::refused(format!(
            "cannot {verb} {name}: it is PerInstance; read models are Shared consumers with a sql sink"
        ))
        .with_fix(format!("`highwater consumer rewind {name} --to earliest` redelivers to every instance")));
    }
    if spec.partitions > 1 {
        return Err(Error::refused(format!(
            "cannot {verb} {name}: it has {} partitions, and a {verb} replays into one shard",
            spec.partitions
        ))
        .with_fix(format!(
            "apply it with partitions: 1, wait until `highwater consumer status {name}` shows one __shared__ shard, \
             {verb}, then raise partitions again"
        )));
    }
    let Some(sql) = spec.sink.sql.clone() else {
        return Err(Error::refused(format!("cannot {verb} {name}: its sink is not sql (no read model to {verb})"))
            .with_fix(format!("`highwater consumer rewind {name} --to earliest` redelivers every event")));
    };
    Ok((spec, sql))
}

/// Events of the consumer's types that were pruned: `(event type, count, newest id)`.
async fn pruned(conn: &mut PgConnection, types: &[String]) -> Result<Vec<(String, i64, i64)>> {
    Ok(sqlx::query_as(
        "SELECT event_type, events, newest_id FROM highwater.pruned
          WHERE cardinality($1::text[]) = 0 OR event_type = ANY ($1) ORDER BY event_type",
    )
    .bind(types)
    .fetch_all(conn)
    .await?)
}

/// `consumer rebuild NAME`: empties the read model (`sink.sql.reset`) and replays every event,
/// in one transaction with the cursor's rewind. When events of its types were pruned, runs
/// `reset` and `sink.sql.bootstrap` instead (refused without a bootstrap: the log cannot rebuild
/// it). Progress is in `consumer status`.
pub async fn rebuild(pool: &PgPool, name: &str, by: &Audit) -> Result<Rebuilt> {
    let (spec, sql) = sql_spec(pool, name, "rebuild").await?;
    let mut conn = pool.acquire().await?;
    rebuild_locked(&mut conn, name, &spec, &sql, by).await
}

async fn rebuild_locked(
    conn: &mut PgConnection,
    name: &str,
    spec: &ConsumerSpec,
    sql: &SqlSink,
    by: &Audit,
) -> Result<Rebuilt> {
    let gone = pruned(conn, &spec.event_types).await?;
    if !gone.is_empty() {
        if sql.bootstrap.is_some() {
            return Ok(Rebuilt::Bootstrapped(bootstrap_locked(conn, name, sql, Some(by)).await?));
        }
        let list: Vec<String> =
            gone.iter().map(|(t, n, newest)| format!("{n} {t} event(s) up to id {newest}")).collect();
        return Err(Error::refused(format!(
            "cannot rebuild {name} from the event log: events it needs were pruned ({})",
            list.join(", ")
        ))
        .with_fix(format!(
            "declare spec.sink.sql.bootstrap (SQL that fills the read model from the application's tables) \
             and run `highwater consumer rebuild {name}` again: with events pruned it bootstraps instead"
        )));
    }
    for _ in 0..RETRIES {
        let mut tx = conn.begin().await?;
        // The cursor before the reset: the update below is conditional on it.
        let Some((from_tx, from_id, from_status)): Option<(Xid8, i64, Status)> = sqlx::query_as(
            "SELECT cursor_tx, cursor_id, status FROM highwater.consumer_shards WHERE consumer = $1 AND instance_id = $2",
        )
        .bind(name)
        .bind(SHARED_INSTANCE)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Err(Error::refused(format!("consumer {name} has no shard yet: nothing to rebuild"))
                .with_fix("start a dispatcher of its group; it builds the read model from the first event"));
        };
        if let Some(reset) = &sql.reset {
            sqlx::raw_sql(sqlx::AssertSqlSafe(reset.clone())).execute(&mut *tx).await.map_err(|e| {
                Error::refused(format!("sink.sql.reset of {name} failed: {e}"))
                    .with_fix("fix the statements; nothing was changed")
            })?;
        }
        let row: Option<(i64, Option<Xid8>, Option<i64>, Status)> = sqlx::query_as(concat!(
            "WITH s AS MATERIALIZED (SELECT ",
            fence!(),
            " AS fence),
                  h AS (SELECT tx_id, id FROM highwater.events, s WHERE tx_id < s.fence
                         ORDER BY tx_id DESC, id DESC LIMIT 1)
             UPDATE highwater.consumer_shards
                SET cursor_tx = '0', cursor_id = 0, attempts = 0, last_error = NULL,
                    failing_event_id = NULL, next_attempt_at = NULL,
                    status = CASE WHEN status = $6 THEN $6 ELSE $7 END,
                    bootstrap_snapshot = NULL, bootstrap_seen = '{}',
                    rebuild_started_at = clock_timestamp(), rebuild_base = delivered_count,
                    rebuild_total = (SELECT count(*) FROM highwater.events e, s
                                      WHERE e.tx_id < s.fence
                                        AND (cardinality($2::text[]) = 0 OR e.event_type = ANY ($2))),
                    rebuild_target_tx = (SELECT tx_id FROM h), rebuild_target_id = (SELECT id FROM h),
                    updated_at = now()
              WHERE consumer = $1 AND instance_id = $5 AND cursor_tx = $3 AND cursor_id = $4
             RETURNING rebuild_total, rebuild_target_tx, rebuild_target_id, status",
        ))
        .bind(name)
        .bind(&spec.event_types)
        .bind(from_tx)
        .bind(from_id)
        .bind(SHARED_INSTANCE)
        .bind(crate::shards::Status::Disabled)
        .bind(crate::shards::Status::Idle)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((total, target_tx, target_id, to_status)) = row else {
            // A dispatcher's batch committed after the reset's snapshot: its rows may have
            // escaped the reset. Start again.
            tx.rollback().await?;
            continue;
        };
        let change = audit::Change {
            consumer: name,
            instance_id: SHARED_INSTANCE,
            action: "rebuilt",
            detail: Some(format!("replaying {total} events")),
            from_status,
            to_status,
            before: Position::from((from_tx, from_id)),
            after: Position::ZERO,
        };
        audit::record(&mut tx, change, by).await?;
        notify::control(&mut *tx, name).await?;
        tx.commit().await?;
        let target = target_tx.zip(target_id).map(Position::from);
        return Ok(Rebuilt::Replaying { total, target });
    }
    Err(Error::refused(format!("consumer {name}: its cursor kept moving during {RETRIES} rebuild attempts"))
        .with_fix("try again; a reset that takes long (DELETE of a large table) is faster as TRUNCATE"))
}

/// Runs `sink.sql.bootstrap` of a consumer whose shard waits for it (created with a bootstrap),
/// or again on request: see [`bootstrap_locked`].
pub async fn bootstrap(pool: &PgPool, name: &str) -> Result<Bootstrapped> {
    let (_, sql) = sql_spec(pool, name, "bootstrap").await?;
    if sql.bootstrap.is_none() {
        return Err(Error::refused(format!("consumer {name} declares no spec.sink.sql.bootstrap"))
            .with_fix("add it to the spec and apply, or use `highwater consumer rebuild` to replay the log"));
    }
    let mut conn = pool.acquire().await?;
    bootstrap_locked(&mut conn, name, &sql, None).await
}

/// In one REPEATABLE READ transaction, so one snapshot S: `reset` (when `reset`), the bootstrap
/// statements, then the cursor put just below S's xmin with the ids of the events S saw at or
/// above its xmin recorded on the shard, which delivery then skips. Events S did not see (every
/// one stamped at or above its xmax, and those of transactions running or not yet committed when
/// it was taken) are delivered afterwards: no gap, no duplicate. Retried when the shard row
/// changed under the snapshot.
/// `rebuilt_by` is a rebuild's (which runs `reset` first and is audited); `None` is a bootstrap.
async fn bootstrap_locked(
    conn: &mut PgConnection,
    name: &str,
    sql: &SqlSink,
    rebuilt_by: Option<&Audit>,
) -> Result<Bootstrapped> {
    let reset = rebuilt_by.is_some();
    let statements = sql.bootstrap.clone().unwrap_or_default();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut tx = conn.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").execute(&mut *tx).await?;
        // The first statement takes the snapshot every later one reads.
        let (xmin, xmax): (Xid8, Xid8) =
            sqlx::query_as(concat!("SELECT ", fence!(), ", pg_snapshot_xmax(pg_current_snapshot())"))
                .fetch_one(&mut *tx)
                .await?;
        // Read in the snapshot: a dispatcher's update after it makes the UPDATE below fail with
        // 40001, which is retried.
        let before: Option<(Xid8, i64, Status)> = sqlx::query_as(
            "SELECT cursor_tx, cursor_id, status FROM highwater.consumer_shards WHERE consumer = $1 AND instance_id = $2",
        )
        .bind(name)
        .bind(SHARED_INSTANCE)
        .fetch_optional(&mut *tx)
        .await?;
        let run = async {
            if reset && let Some(r) = &sql.reset {
                sqlx::raw_sql(sqlx::AssertSqlSafe(r.clone())).execute(&mut *tx).await?;
            }
            sqlx::raw_sql(sqlx::AssertSqlSafe(statements.clone())).execute(&mut *tx).await?;
            sqlx::query_as::<_, (i32, Xid8, i64, Status)>(concat!(
                "WITH seen AS (
                     SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM highwater.events
                      WHERE tx_id >= ",
                fence!(),
                "
                        AND tx_id < pg_snapshot_xmax(pg_current_snapshot()))
                 UPDATE highwater.consumer_shards s
                    SET cursor_tx = ((",
                fence!(),
                "::text::numeric - 1)::text)::xid8,
                        cursor_id = 9223372036854775807,
                        bootstrap_snapshot = pg_current_snapshot(), bootstrap_seen = seen.ids,
                        status = CASE WHEN c.suspended THEN $3 ELSE $4 END,
                        bootstrap_pending = false, attempts = 0, last_error = NULL, failing_event_id = NULL,
                        next_attempt_at = NULL, rebuild_started_at = NULL, rebuild_total = NULL,
                        rebuild_base = NULL, rebuild_target_tx = NULL, rebuild_target_id = NULL,
                        updated_at = now()
                   FROM seen, highwater.consumers c
                  WHERE c.name = s.consumer AND s.consumer = $1 AND s.instance_id = $2
                 RETURNING cardinality(seen.ids), s.cursor_tx, s.cursor_id, s.status",
            ))
            .bind(name)
            .bind(SHARED_INSTANCE)
            .bind(crate::shards::Status::Disabled)
            .bind(crate::shards::Status::Idle)
            .fetch_optional(&mut *tx)
            .await
        };
        match run.await {
            Ok(Some((seen, to_tx, to_id, to_status))) => {
                if let (Some(by), Some((from_tx, from_id, from_status))) = (rebuilt_by, before) {
                    let change = audit::Change {
                        consumer: name,
                        instance_id: SHARED_INSTANCE,
                        action: "rebuilt",
                        detail: Some("bootstrapped (events were pruned)".into()),
                        from_status,
                        to_status,
                        before: Position::from((from_tx, from_id)),
                        after: Position::from((to_tx, to_id)),
                    };
                    audit::record(&mut tx, change, by).await?;
                }
                notify::control(&mut *tx, name).await?;
                tx.commit().await?;
                return Ok(Bootstrapped { snapshot_xmin: xmin, snapshot_xmax: xmax, seen_in_window: seen as usize });
            }
            Ok(None) => {
                return Err(Error::refused(format!("consumer {name} has no shard to bootstrap"))
                    .with_fix("apply its definition again (it registers the shard)"));
            }
            Err(e) => {
                let _ = tx.rollback().await;
                let serialization = e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "40001");
                if serialization && attempt < RETRIES {
                    continue;
                }
                return Err(Error::refused(format!("sink.sql.bootstrap of {name} failed: {e}"))
                    .with_fix("fix the statements (nothing was changed), then `highwater consumer bootstrap` again"));
            }
        }
    }
}

/// Marks a just-created shard as waiting for its bootstrap (disabled until it ran), inside the
/// transaction that created it.
pub async fn mark_bootstrap_pending(conn: &mut PgConnection, name: &str) -> Result<()> {
    sqlx::query(
        "UPDATE highwater.consumer_shards SET status = $3, bootstrap_pending = true, updated_at = now()
          WHERE consumer = $1 AND instance_id = $2",
    )
    .bind(name)
    .bind(SHARED_INSTANCE)
    .bind(crate::shards::Status::Disabled)
    .execute(conn)
    .await?;
    Ok(())
}
