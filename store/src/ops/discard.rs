//! `consumer discard`: a dead letter that is not to be delivered at all, typically the blocker of
//! an `errorMode: skipStream` stream whose cause cannot be fixed.
//!
//! The row is kept, marked with who, why and when (`discarded_*`), in one transaction with the
//! release of the events parked behind it: they are requested for redrive exactly as after a
//! successful redrive of the blocker (`redrive::release_blocked`, the one path for both), so
//! the dispatcher delivers them in stream order and the stream goes on without the discarded
//! event. The cursor is never read or written. docs/consumers.md, "Per-stream order".
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use super::redrive;
use crate::{Error, Result, notify};

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub consumer: String,
    pub event: i64,
    /// Only this instance's dead letter (a PerInstance consumer's pod); `None`: every shard's
    /// dead letter of the event.
    pub instance: Option<String>,
    /// Who decides: the OS user for the CLI, `http:ops-token-N`, `kubernetes:<user>`.
    pub by: String,
    /// Why; required: a discarded event is an event a consumer never sees.
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Discarded {
    pub consumer: String,
    pub event_id: i64,
    /// The shards whose dead letter of the event was discarded.
    pub instances: Vec<String>,
    /// The events that were parked behind it, now requested for redrive, in stream order.
    pub released: Vec<i64>,
    pub discarded_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct Row {
    instance_id: String,
    blocked_by: Option<i64>,
    redrive_at: Option<DateTime<Utc>>,
    redrive_by: Option<String>,
    redriven_at: Option<DateTime<Utc>>,
    discarded_at: Option<DateTime<Utc>>,
    discarded_by: Option<String>,
}

/// Refuses an empty reason before the database is asked (`highwater_ops::Discard::validate` runs
/// it too).
pub fn check_reason(reason: &str) -> Result<()> {
    if reason.trim().is_empty() {
        return Err(Error::refused("a discard needs a reason: the event is never delivered to the consumer")
            .with_fix("say why with --reason TEXT"));
    }
    Ok(())
}

/// Discards the open dead letter(s) of `event` and releases what they blocked, in one
/// transaction; refuses (nothing changed) anything but an open dead letter of the consumer that
/// is not parked behind another.
pub async fn discard(pool: &sqlx::PgPool, r: &Request) -> Result<Discarded> {
    check_reason(&r.reason)?;
    let (consumer, id) = (&r.consumer, r.event);
    let list = format!("`highwater consumer dead-letters {consumer}` lists its dead letters");
    let mut tx = pool.begin().await?;
    let known: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM highwater.consumers WHERE name = $1)")
        .bind(consumer)
        .fetch_one(&mut *tx)
        .await?;
    if !known {
        return Err(Error::no_consumer(consumer));
    }
    // Locked: a concurrent redrive or discard of the same dead letter waits, then sees it done.
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT instance_id, blocked_by, redrive_at, redrive_by, redriven_at, discarded_at, discarded_by
           FROM highwater.dead_letters
          WHERE consumer = $1 AND event_id = $2 AND ($3::text IS NULL OR instance_id = $3)
          ORDER BY instance_id
            FOR UPDATE",
    )
    .bind(consumer)
    .bind(id)
    .bind(&r.instance)
    .fetch_all(&mut *tx)
    .await?;
    if rows.is_empty() {
        let which = r.instance.as_ref().map(|i| format!(" (instance {i})")).unwrap_or_default();
        return Err(
            Error::refused(format!("event {id} is not a dead letter of consumer {consumer}{which}")).with_fix(list)
        );
    }
    for row in &rows {
        refuse(row, consumer, id, &list)?;
    }
    let instances: Vec<String> = rows.into_iter().map(|row| row.instance_id).collect();
    let at: DateTime<Utc> = sqlx::query_scalar(
        "UPDATE highwater.dead_letters SET discarded_at = now(), discarded_by = $3, discard_reason = $4
          WHERE consumer = $1 AND event_id = $2 AND instance_id = ANY($5)
         RETURNING discarded_at",
    )
    .bind(consumer)
    .bind(id)
    .bind(&r.by)
    .bind(&r.reason)
    .bind(&instances)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .next()
    .ok_or_else(|| Error::Internal("the discard marked no dead letter".into()))?;
    for instance in &instances {
        redrive::release_blocked(&mut tx, consumer, instance).await?;
    }
    let released = released(&mut tx, consumer, id, &instances).await?;
    notify::control(&mut *tx, consumer).await?;
    tx.commit().await?;
    Ok(Discarded { consumer: consumer.clone(), event_id: id, instances, released, discarded_at: at })
}

/// The refusal of a row that is not an open dead letter that may be discarded.
fn refuse(row: &Row, consumer: &str, id: i64, list: &str) -> Result<()> {
    let when = |t: DateTime<Utc>| t.format("%Y-%m-%d %H:%M:%S").to_string();
    if let Some(at) = row.discarded_at {
        return Err(Error::refused(format!(
            "event {id} was already discarded from consumer {consumer} at {} (by {})",
            when(at),
            row.discarded_by.as_deref().unwrap_or("?")
        ))
        .with_fix(format!("nothing to do; {list}")));
    }
    if let Some(at) = row.redriven_at {
        return Err(Error::refused(format!(
            "event {id} is no longer a dead letter of consumer {consumer}: it was redriven at {} (by {})",
            when(at),
            row.redrive_by.as_deref().unwrap_or("?")
        ))
        .with_fix(format!("nothing to do: it was delivered; {list}")));
    }
    if row.redrive_at.is_some() {
        return Err(Error::refused(format!(
            "a redrive of event {id} to consumer {consumer} is pending (requested by {})",
            row.redrive_by.as_deref().unwrap_or("?")
        ))
        .with_fix("wait for its delivery; should it fail again, it is a dead letter again and can be discarded"));
    }
    if let Some(by) = row.blocked_by {
        return Err(Error::refused(format!(
            "event {id} is parked behind dead letter {by} of its stream (errorMode skipStream) and was never tried"
        ))
        .with_fix(format!(
            "discard or redrive its blocker: `highwater consumer discard {consumer} --event {by} --reason TEXT` or `highwater consumer redrive {consumer} --event {by}`"
        )));
    }
    Ok(())
}

/// The events parked behind `id` in `instances` that are now requested, in stream order.
async fn released(conn: &mut PgConnection, consumer: &str, id: i64, instances: &[String]) -> Result<Vec<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT d.event_id FROM highwater.dead_letters d
           LEFT JOIN highwater.events e ON e.id = d.event_id
          WHERE d.consumer = $1 AND d.instance_id = ANY($3) AND d.blocked_by = $2 AND d.redrive_at IS NOT NULL
          ORDER BY e.tx_id, d.event_id, d.instance_id",
    )
    .bind(consumer)
    .bind(id)
    .bind(instances)
    .fetch_all(conn)
    .await?)
}
