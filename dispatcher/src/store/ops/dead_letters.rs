//! `consumer dead-letters`: the events shards gave up on (`errorMode: skip`) or that an operator
//! skipped, with the error that put them there.
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use crate::Result;

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DeadLetter {
    pub consumer: String,
    pub instance_id: String,
    pub event_id: i64,
    /// `None` once retention has pruned the event.
    pub event_type: Option<String>,
    pub attempts: i32,
    pub error: String,
    pub created_at: DateTime<Utc>,
}

/// Oldest first; every consumer's when `consumer` is `None`.
pub async fn dead_letters(pool: &PgPool, consumer: Option<&str>) -> Result<Vec<DeadLetter>> {
    Ok(sqlx::query_as(
        "SELECT d.consumer, d.instance_id, d.event_id, e.event_type, d.attempts, d.error, d.created_at
           FROM highwater.dead_letters d
           LEFT JOIN highwater.events e ON e.id = d.event_id
          WHERE $1::text IS NULL OR d.consumer = $1
          ORDER BY d.created_at, d.consumer, d.instance_id, d.event_id",
    )
    .bind(consumer)
    .fetch_all(pool)
    .await?)
}

/// One line per dead letter; the error on one line, cut to fit a terminal.
pub fn render_dead_letters(rows: &[DeadLetter]) -> String {
    let mut out = format!(
        "{:<24} {:<22} {:>10} {:<20} {:>8}  {:<20}  {}\n",
        "CONSUMER", "INSTANCE", "EVENT", "TYPE", "ATTEMPTS", "PARKED AT", "ERROR"
    );
    for d in rows {
        let error: String = d.error.replace(['\n', '\r'], " ").chars().take(100).collect();
        out.push_str(&format!(
            "{:<24} {:<22} {:>10} {:<20} {:>8}  {:<20}  {}\n",
            d.consumer,
            d.instance_id,
            d.event_id,
            d.event_type.as_deref().unwrap_or("(pruned)"),
            d.attempts,
            d.created_at.format("%Y-%m-%d %H:%M:%S"),
            error
        ));
    }
    out
}
