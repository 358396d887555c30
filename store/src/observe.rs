//! What the dispatcher's database gauges read besides `ops::status_where`: the per-instance
//! shards that stopped beating, and the age of the transaction holding the fence back.
use sqlx::PgPool;

use crate::{Result, ops::MIN_STALE_AFTER};

const STALE_SHARDS: &str = "SELECT s.consumer, s.instance_id,
            extract(epoch FROM now() - coalesce(s.heartbeat_at, s.updated_at))::float8
       FROM highwater.consumer_shards s JOIN highwater.consumers c ON c.name = s.consumer
      WHERE c.consumer_group = $1 AND NOT highwater.is_shared_shard(s.instance_id)
        AND coalesce(s.heartbeat_at, s.updated_at) < now() - make_interval(secs => $2)";

const FENCE_AGE: &str = "SELECT coalesce(extract(epoch FROM now() - least(
           (SELECT min(xact_start) FROM pg_stat_activity WHERE backend_xid IS NOT NULL),
           (SELECT min(prepared) FROM pg_prepared_xacts))), 0)::float8";

/// The group's per-instance shards whose heartbeat (or, before the first one, registration) is
/// older than [`MIN_STALE_AFTER`], `(consumer, instance, age in seconds)`. Their instance
/// stopped: every running dispatcher refreshes its shards' heartbeat every 10 s.
pub async fn stale_shards(pool: &PgPool, group: &str) -> Result<Vec<(String, String, f64)>> {
    Ok(sqlx::query_as(STALE_SHARDS).bind(group).bind(MIN_STALE_AFTER.as_secs_f64()).fetch_all(pool).await?)
}

/// Seconds since the oldest transaction holding a transaction id started (prepared
/// transactions included); 0 when none does. Other roles' sessions are visible only with
/// `pg_read_all_stats`, so grant it to the dispatcher's role.
pub async fn fence_age(pool: &PgPool) -> Result<f64> {
    Ok(sqlx::query_scalar(FENCE_AGE).fetch_one(pool).await?)
}
