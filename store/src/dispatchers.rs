//! The dispatchers' liveness rows (`highwater.dispatchers`): which dispatchers of a group are
//! alive, for the engine's sharing of partitions (`dispatch::membership`).
use std::time::Duration;

use sqlx::PgPool;

use crate::{Result, migrate::window::SCHEMA_VERSION};

/// Refreshes `me`'s row (and which binary it is, so that `migrate` refuses a breaking step while
/// it runs), drops rows and sleep marks gone for a day, and reads the group's live rows: those
/// refreshed within `ttl`, `me` always among them.
const REFRESH: &str = "WITH me AS (
          INSERT INTO highwater.dispatchers (instance_id, consumer_group, binary_schema) VALUES ($1, $2, $4)
          ON CONFLICT (instance_id) DO UPDATE
             SET heartbeat_at = now(), consumer_group = EXCLUDED.consumer_group,
                 binary_schema = EXCLUDED.binary_schema
          RETURNING instance_id),
          -- Rows of dispatchers gone for a day: kept that long only for `consumer top`.
          gone AS (
          DELETE FROM highwater.dispatchers
           WHERE consumer_group = $2 AND heartbeat_at < now() - interval '1 day'),
          -- Sleep marks whose lease ran out a day ago: dispatchers long gone.
          stale AS (
          DELETE FROM highwater.sleepers WHERE asleep_until < now() - interval '1 day')
     SELECT instance_id FROM highwater.dispatchers
      WHERE consumer_group = $2 AND instance_id <> $1
        AND heartbeat_at > now() - make_interval(secs => $3)
     UNION ALL SELECT instance_id FROM me";

const LEAVE: &str = "DELETE FROM highwater.dispatchers WHERE instance_id = $1";

/// Refreshes `me`'s row in `group` and returns the group's live dispatchers, sorted, `me` among
/// them, in one statement.
pub async fn refresh(pool: &PgPool, group: &str, me: &str, ttl: Duration) -> Result<Vec<String>> {
    let mut live: Vec<String> = sqlx::query_scalar(REFRESH)
        .bind(me)
        .bind(group)
        .bind(ttl.as_secs_f64())
        .bind(SCHEMA_VERSION)
        .fetch_all(pool)
        .await?;
    live.sort();
    live.dedup();
    Ok(live)
}

/// Removes `me`'s row, so the others take its partitions now rather than after the ttl.
pub async fn leave(pool: &PgPool, me: &str) -> Result<()> {
    sqlx::query(LEAVE).bind(me).execute(pool).await?;
    Ok(())
}
