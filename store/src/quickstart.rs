//! The quickstart's statements (`highwater quickstart`, dispatcher/src/devtools/quickstart.rs):
//! the example read model it creates (examples/schema.sql) and the counts it checks delivery by.
//! Here so that no crate above the store runs SQL of its own.
use sqlx::PgPool;

use crate::Result;

/// The example read model (`order_totals`, the SQL sink's target), created if missing.
pub async fn create_example_schema(pool: &PgPool) -> Result<()> {
    sqlx::raw_sql(include_str!("../../examples/schema.sql")).execute(pool).await?;
    Ok(())
}

/// How many shard rows `consumer` has: one per dispatcher process for a PerInstance consumer.
pub async fn shards_of(pool: &PgPool, consumer: &str) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM highwater.consumer_shards WHERE consumer = $1")
        .bind(consumer)
        .fetch_one(pool)
        .await?)
}

/// What the example projection holds against the log: its orders, the last event it applied and
/// the newest event appended.
pub struct Projected {
    pub orders: i64,
    pub last_applied: Option<i64>,
    pub newest_event: Option<i64>,
}

pub async fn projected(pool: &PgPool) -> Result<Projected> {
    let (orders, last_applied, newest_event) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM order_totals), (SELECT max(last_event_id) FROM order_totals),
                (SELECT max(id) FROM highwater.events)",
    )
    .fetch_one(pool)
    .await?;
    Ok(Projected { orders, last_applied, newest_event })
}
