//! Which shards an ops command addresses, and what they look like when it does not apply.
use highwater_crds::{Delivery, SHARED_INSTANCE};
use sqlx::{PgConnection, Row};

use crate::{Error, Result, shards::Status};

/// The shards of one consumer that a command addresses.
#[derive(Debug, Clone)]
pub struct Scope {
    pub consumer: String,
    pub shared: bool,
    pub group: String,
    pub suspended: bool,
    /// The one shard addressed, or `None` for every shard of a PerInstance consumer (or every
    /// partition of a partitioned Shared one).
    pub instance: Option<String>,
}

impl Scope {
    /// ` --instance ID` for a command line that addresses `instance` again, empty for Shared
    /// consumers (whose one shard is the default).
    pub fn instance_flag(&self, instance: &str) -> String {
        if self.shared && instance == SHARED_INSTANCE { String::new() } else { format!(" --instance {instance}") }
    }
}

/// A shard as the refusal messages describe it.
#[derive(Debug, Clone)]
pub struct ShardState {
    pub instance_id: String,
    pub status: Status,
    pub attempts: i32,
    pub failing_event_id: Option<i64>,
    /// Whether `failing_event_id` still names an event (prune may have deleted it).
    pub failing_event_exists: bool,
}

/// Resolves the consumer and the instance: the `__shared__` shard by default for Shared consumers,
/// every shard for PerInstance ones. Refuses unknown consumers and instances.
pub async fn resolve(conn: &mut PgConnection, consumer: &str, instance: Option<&str>) -> Result<Scope> {
    let row: Option<(Delivery, String, bool, bool)> = sqlx::query_as(
        "SELECT delivery, consumer_group, suspended,
                partitions > 1 OR EXISTS (SELECT 1 FROM highwater.consumer_shards s
                                           WHERE s.consumer = c.name AND s.partition_count IS NOT NULL)
           FROM highwater.consumers c WHERE name = $1",
    )
    .bind(consumer)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((delivery, group, suspended, partitioned)) = row else {
        return Err(Error::no_consumer(consumer));
    };
    let shared = delivery == Delivery::Shared;
    if shared && partitioned {
        if let Some(i) = instance
            && !highwater_crds::is_shared_instance(i)
        {
            return Err(Error::refused(format!(
                "consumer {consumer} is Shared and partitioned: its shards are its partitions \
                 (__shared__/p<i>of<n>), there is no instance {i:?}"
            ))
            .with_fix(format!(
                "drop --instance to address every partition, or pick one from `highwater consumer status {consumer}`"
            )));
        }
        let scope =
            Scope { consumer: consumer.to_owned(), shared, group, suspended, instance: instance.map(str::to_owned) };
        if states(conn, &scope).await?.is_empty() {
            return Err(no_shard(&scope));
        }
        return Ok(scope);
    }
    if shared && instance.is_some_and(|i| i != SHARED_INSTANCE) {
        return Err(Error::refused(format!(
            "consumer {consumer} is Shared: its one shard is {SHARED_INSTANCE}, there is no instance {:?}",
            instance.unwrap_or_default()
        ))
        .with_fix("drop --instance"));
    }
    let instance = if shared { Some(SHARED_INSTANCE.to_owned()) } else { instance.map(str::to_owned) };
    let scope = Scope { consumer: consumer.to_owned(), shared, group, suspended, instance };
    if states(conn, &scope).await?.is_empty() {
        return Err(no_shard(&scope));
    }
    Ok(scope)
}

/// The refusal for a scope without shards.
pub fn no_shard(scope: &Scope) -> Error {
    let c = &scope.consumer;
    match (&scope.instance, scope.shared) {
        (Some(i), true) => Error::refused(format!("consumer {c} has no {i} shard yet")).with_fix(format!(
            "`highwater consumer apply` its definition again (it creates the shard), or start a dispatcher of group {}",
            scope.group
        )),
        (Some(i), false) => Error::refused(format!("consumer {c} has no shard for instance {i:?}"))
            .with_fix(format!("`highwater consumer status {c}` lists its shards")),
        (None, _) => Error::refused(format!(
            "consumer {c} has no shards yet: no dispatcher of its group ({}) has started, so there is \
             nothing to change",
            scope.group
        )),
    }
}

/// The shards in scope, in instance order.
pub async fn states(conn: &mut PgConnection, scope: &Scope) -> Result<Vec<ShardState>> {
    let rows = sqlx::query(
        "SELECT s.instance_id, s.status, s.attempts, s.failing_event_id,
                EXISTS (SELECT 1 FROM highwater.events e WHERE e.id = s.failing_event_id) AS failing_event_exists
           FROM highwater.consumer_shards s
          WHERE s.consumer = $1 AND ($2::text IS NULL OR s.instance_id = $2)
          ORDER BY s.instance_id",
    )
    .bind(&scope.consumer)
    .bind(&scope.instance)
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(ShardState {
                instance_id: r.try_get("instance_id")?,
                status: r.try_get("status")?,
                attempts: r.try_get("attempts")?,
                failing_event_id: r.try_get("failing_event_id")?,
                failing_event_exists: r.try_get("failing_event_exists")?,
            })
        })
        .collect()
}

/// Refuses a command that applies to none of the shards in scope, with each shard's reason.
pub fn not_applicable(
    verb: &str,
    scope: &Scope,
    states: &[ShardState],
    why_not: impl Fn(&Scope, &ShardState) -> String,
) -> Error {
    if states.is_empty() {
        return no_shard(scope);
    }
    let mut msg = format!("cannot {verb} consumer {}:", scope.consumer);
    for s in states {
        msg.push_str(&format!("\n  shard {}: {}", s.instance_id, why_not(scope, s)));
    }
    Error::refused(msg)
}
