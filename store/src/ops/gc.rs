//! `consumer gc`: deletes the PerInstance shards of instances that are gone, found by heartbeat,
//! for deployments without the operator (which deletes its pods' shards itself).
use std::{fmt, time::Duration};

use highwater_crds::SHARED_INSTANCE;
use sqlx::{PgPool, Row};

use crate::{Error, Position, Result, notify, shards::Status};

/// A running dispatcher refreshes its shards' heartbeat every 10 s; anything shorter than this
/// could delete the shard of a live instance, which would then start again from `startFrom`.
pub const MIN_STALE_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Delete shards whose heartbeat is older than this.
    pub stale_after: Duration,
    /// Only this consumer's shards.
    pub consumer: Option<String>,
    /// Only this instance's shards.
    pub instance: Option<String>,
    /// Also shards with a `pod_uid`, which the operator manages.
    pub include_managed: bool,
}

/// A deleted shard.
#[derive(Debug, Clone)]
pub struct Collected {
    pub consumer: String,
    pub instance_id: String,
    pub status: Status,
    pub cursor: Position,
    pub heartbeat_age: Duration,
    pub pod_uid: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct GcReport {
    pub deleted: Vec<Collected>,
    /// Stale shards kept because they have a `pod_uid` (`consumer/instance`).
    pub kept_managed: Vec<String>,
}

impl fmt::Display for Collected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let age = humantime::format_duration(Duration::from_secs(self.heartbeat_age.as_secs()));
        write!(
            f,
            "eventconsumer/{} shard {} deleted (heartbeat {age} ago; status {}; cursor {})",
            self.consumer, self.instance_id, self.status, self.cursor
        )
    }
}

// Shards registered before heartbeats existed have none: their last update stands in.
const AGE: &str = "now() - coalesce(s.heartbeat_at, s.updated_at)";

/// Deletes stale PerInstance shards (never `__shared__` ones) in one statement, so a heartbeat
/// that lands first keeps its shard.
pub async fn gc(pool: &PgPool, o: &GcOptions) -> Result<GcReport> {
    if o.stale_after < MIN_STALE_AFTER {
        return Err(Error::refused(format!(
            "--stale-after {} is too short: running dispatchers refresh their heartbeat every 10 s, so a live \
             instance's shard could be deleted (it would then start again from startFrom)",
            humantime::format_duration(o.stale_after)
        ))
        .with_fix(format!("use at least {}", humantime::format_duration(MIN_STALE_AFTER))));
    }
    if o.instance.as_deref().is_some_and(highwater_crds::is_shared_instance) {
        return Err(Error::refused(format!(
            "gc never deletes {SHARED_INSTANCE} shards (nor their partitions): they are the cursors of \
             Shared consumers, not of an instance"
        ))
        .with_fix("`highwater consumer delete NAME` removes a consumer with its cursor"));
    }
    let mut tx = pool.begin().await?;
    if let Some(c) = &o.consumer {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM highwater.consumers WHERE name = $1)")
            .bind(c)
            .fetch_one(&mut *tx)
            .await?;
        if !exists {
            return Err(Error::no_consumer(c));
        }
    }
    let secs = o.stale_after.as_secs_f64();
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM highwater.consumer_shards s
          WHERE NOT highwater.is_shared_shard(s.instance_id)
            AND ($1::text IS NULL OR s.consumer = $1) AND ($2::text IS NULL OR s.instance_id = $2)
            AND ($3 OR s.pod_uid IS NULL)
            AND {AGE} > make_interval(secs => $4)
         RETURNING s.consumer, s.instance_id, s.status, s.cursor_tx, s.cursor_id, s.pod_uid,
                   extract(epoch FROM {AGE})::float8 AS age"
    )))
    .bind(&o.consumer)
    .bind(&o.instance)
    .bind(o.include_managed)
    .bind(secs)
    .fetch_all(&mut *tx)
    .await?;
    let mut report = GcReport::default();
    for r in &rows {
        report.deleted.push(Collected {
            consumer: r.try_get("consumer")?,
            instance_id: r.try_get("instance_id")?,
            status: r.try_get("status")?,
            cursor: Position::from((r.try_get("cursor_tx")?, r.try_get("cursor_id")?)),
            heartbeat_age: Duration::from_secs_f64(r.try_get::<f64, _>("age")?.max(0.0)),
            pod_uid: r.try_get("pod_uid")?,
        });
    }
    report.deleted.sort_by(|a, b| (&a.consumer, &a.instance_id).cmp(&(&b.consumer, &b.instance_id)));
    report.kept_managed = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT s.consumer || '/' || s.instance_id FROM highwater.consumer_shards s
          WHERE NOT highwater.is_shared_shard(s.instance_id) AND s.pod_uid IS NOT NULL
            AND ($1::text IS NULL OR s.consumer = $1) AND ($2::text IS NULL OR s.instance_id = $2)
            AND {AGE} > make_interval(secs => $3)
          ORDER BY 1"
    )))
    .bind(&o.consumer)
    .bind(&o.instance)
    .bind(secs)
    .fetch_all(&mut *tx)
    .await?;
    if report.deleted.is_empty()
        && let Some(i) = &o.instance
    {
        return Err(instance_not_stale(&mut tx, o, i).await?);
    }
    let mut consumers: Vec<&str> = report.deleted.iter().map(|c| c.consumer.as_str()).collect();
    consumers.dedup();
    for c in consumers {
        notify::control(&mut *tx, c).await?;
    }
    tx.commit().await?;
    Ok(report)
}

/// Why an instance named with `--instance` had nothing to delete.
async fn instance_not_stale(conn: &mut sqlx::PgConnection, o: &GcOptions, instance: &str) -> Result<Error> {
    let rows: Vec<(String, f64, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT s.consumer, extract(epoch FROM {AGE})::float8, s.pod_uid FROM highwater.consumer_shards s
          WHERE s.instance_id = $1 AND ($2::text IS NULL OR s.consumer = $2) ORDER BY 1"
    )))
    .bind(instance)
    .bind(&o.consumer)
    .fetch_all(conn)
    .await?;
    if rows.is_empty() {
        return Ok(Error::refused(format!(
            "no shard of instance {instance:?}{}",
            o.consumer.as_deref().map(|c| format!(" for consumer {c}")).unwrap_or_default()
        ))
        .with_fix("`highwater consumer list` shows the shards"));
    }
    let mut msg = format!("not deleting the shards of instance {instance}:");
    for (consumer, age, pod_uid) in rows {
        let age = Duration::from_secs(age.max(0.0) as u64);
        if age <= o.stale_after {
            msg.push_str(&format!(
                "\n  {consumer}: heartbeat {} ago, not older than --stale-after {}: its instance looks alive",
                humantime::format_duration(age),
                humantime::format_duration(o.stale_after)
            ));
        } else if let Some(uid) = pod_uid {
            msg.push_str(&format!(
                "\n  {consumer}: managed by the operator (pod uid {uid}), which deletes it with its pod\n    to \
                 delete it anyway: add --include-managed"
            ));
        }
    }
    Ok(Error::refused(msg))
}
