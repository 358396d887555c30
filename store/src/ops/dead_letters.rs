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
    /// `dead`, `pending` (a redrive was requested and is not delivered yet), `redriven` or
    /// `discarded` (`consumer discard`: never delivered).
    pub state: String,
    /// Who asked for the last redrive, and why (`consumer redrive --reason`).
    pub redrive_by: Option<String>,
    pub redrive_reason: Option<String>,
    pub redrive_requested_at: Option<DateTime<Utc>>,
    /// When the redrive was applied (SQL sink) or acknowledged (external sinks).
    pub redriven_at: Option<DateTime<Utc>>,
    /// Who discarded it, why and when (`consumer discard`).
    pub discarded_by: Option<String>,
    pub discard_reason: Option<String>,
    pub discarded_at: Option<DateTime<Utc>>,
}

/// Oldest first; every consumer's when `consumer` is `None`.
pub async fn dead_letters(pool: &PgPool, consumer: Option<&str>) -> Result<Vec<DeadLetter>> {
    Ok(sqlx::query_as(
        "SELECT d.consumer, d.instance_id, d.event_id, e.event_type, d.attempts, d.error, d.created_at,
                CASE WHEN d.discarded_at IS NOT NULL THEN 'discarded'
                     WHEN d.redrive_at IS NOT NULL THEN 'pending'
                     WHEN d.redriven_at IS NOT NULL THEN 'redriven' ELSE 'dead' END AS state,
                d.redrive_by, d.redrive_reason, d.redrive_requested_at, d.redriven_at,
                d.discarded_by, d.discard_reason, d.discarded_at
           FROM highwater.dead_letters d
           LEFT JOIN highwater.events e ON e.id = d.event_id
          WHERE $1::text IS NULL OR d.consumer = $1
          ORDER BY d.created_at, d.consumer, d.instance_id, d.event_id",
    )
    .bind(consumer)
    .fetch_all(pool)
    .await?)
}
