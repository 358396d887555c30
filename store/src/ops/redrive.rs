//! `consumer redrive`: dead letters delivered again through their consumer's sink.
//!
//! A request only marks dead letters (`redrive_at`, who, why, when, and the shard that delivers
//! it, `redrive_instance`) and notifies the dispatchers; the dispatcher that runs that shard
//! delivers each one through the very sink object of its live delivery, under the shard's claim,
//! and marks it redriven in the transaction of a SQL sink's apply or right after an external
//! sink's acknowledgement (the engine's `dispatch::redrive`). The cursor is never read or written for
//! it. docs/consumers.md, "Redrive", says why the dispatcher delivers and not this process.
use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use highwater_crds::{Delivery, is_shared_instance};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use crate::{Error, Event, Result, events::EventRow, notify};

/// A redrive of more dead letters than this asks for a confirmation (`--yes`, `"yes": true`):
/// an accidental replay of a whole dead-letter table is the mistake it prevents.
pub const CONFIRM_ABOVE: usize = 100;

/// Which dead letters of one consumer a redrive takes. Filters combine (AND); at least one of
/// them, or `all`, must be given.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub consumer: String,
    /// Only this instance's dead letters (a PerInstance consumer's pod).
    pub instance: Option<String>,
    /// This one event: refused unless it is a dead letter that can be redriven.
    pub event: Option<i64>,
    pub event_type: Option<String>,
    /// A substring of the dead letter's error.
    pub error_contains: Option<String>,
    /// Parked at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Parked before this time.
    pub until: Option<DateTime<Utc>>,
    pub all: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub selection: Selection,
    /// Who asks: the OS user for the CLI, `kubernetes:<user>` for the annotation.
    pub by: String,
    pub reason: Option<String>,
    /// At most this many deliveries per second (spaced by `redrive_at`); `None`: all at once.
    pub rate: Option<f64>,
    /// Select and report only; nothing is changed.
    pub dry_run: bool,
}

/// One dead letter a redrive takes.
#[derive(Debug, Clone, Serialize)]
pub struct Selected {
    pub instance_id: String,
    pub event_id: i64,
    pub event_type: String,
    pub stream: String,
    pub error: String,
    /// The shard that delivers it (its own, or for a Shared consumer whose split changed since,
    /// one of the current split).
    pub via: String,
}

/// A dead letter that matched the filters but cannot be redriven, and why.
#[derive(Debug, Clone, Serialize)]
pub struct LeftOut {
    pub instance_id: String,
    pub event_id: i64,
    pub why: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub consumer: String,
    /// In delivery order: the events' `(tx_id, id)` order.
    pub selected: Vec<Selected>,
    pub left_out: Vec<LeftOut>,
    /// When the request was recorded (`redrive_requested_at`); `None` for a dry run.
    pub requested_at: Option<DateTime<Utc>>,
}

/// What became of a request so far.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Progress {
    pub redriven: u64,
    /// `(event id, the new error)` of each redrive that failed: dead letters again.
    pub failed: Vec<(i64, String)>,
    pub pending: u64,
}

#[derive(sqlx::FromRow)]
struct Candidate {
    instance_id: String,
    event_id: i64,
    error: String,
    created_at: DateTime<Utc>,
    redrive_at: Option<DateTime<Utc>>,
    redrive_by: Option<String>,
    redrive_requested_at: Option<DateTime<Utc>>,
    redriven_at: Option<DateTime<Utc>>,
    /// Discarded (`consumer discard`): never redriven.
    discarded_at: Option<DateTime<Utc>>,
    discarded_by: Option<String>,
    event_type: Option<String>,
    stream: Option<String>,
    /// Blocked by this dead letter, not redriven yet (`errorMode: skipStream`).
    blocked_by: Option<i64>,
}

/// Refuses, before the database is asked, a request without a filter or with a rate that is not
/// a positive number (`highwater_ops::Redrive::validate` runs it too).
pub fn check(r: &Request) -> Result<()> {
    let s = &r.selection;
    if !s.all
        && s.event.is_none()
        && s.event_type.is_none()
        && s.error_contains.is_none()
        && s.since.is_none()
        && s.until.is_none()
    {
        return Err(Error::refused("a redrive needs a selection of dead letters").with_fix(
            "name them: --event ID, --type TYPE, --error-contains TEXT, --since/--until TIME, or --all for every one",
        ));
    }
    if let Some(rate) = r.rate
        && !(rate.is_finite() && rate > 0.0)
    {
        return Err(Error::refused(format!("--rate {rate} is not a positive number of events per second"))
            .with_fix("e.g. --rate 10/s"));
    }
    Ok(())
}

/// Selects the dead letters, and unless `dry_run` marks them for redelivery and notifies the
/// dispatchers, in one transaction. Refuses (nothing changed) an unknown consumer, a selection
/// without a filter, an `event` that is not a dead letter that can be redriven, and a selection
/// that takes nothing.
pub async fn redrive(pool: &PgPool, r: &Request) -> Result<Plan> {
    check(r)?;
    let s = &r.selection;
    let mut tx = pool.begin().await?;
    let delivery: Option<Delivery> = sqlx::query_scalar("SELECT delivery FROM highwater.consumers WHERE name = $1")
        .bind(&s.consumer)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(delivery) = delivery else {
        return Err(Error::no_consumer(&s.consumer));
    };
    let shards = shard_ids(&mut tx, &s.consumer).await?;
    // The rows are locked: a concurrent request for the same dead letters waits, then sees them
    // pending.
    let candidates: Vec<Candidate> = sqlx::query_as(
        "SELECT d.instance_id, d.event_id, d.error, d.created_at, d.redrive_at, d.redrive_by,
                d.redrive_requested_at, d.redriven_at, d.discarded_at, d.discarded_by, e.event_type,
                e.stream_type || '/' || e.stream_id AS stream,
                (SELECT b.event_id FROM highwater.dead_letters b
                  WHERE b.consumer = d.consumer AND b.instance_id = d.instance_id AND b.event_id = d.blocked_by
                    AND b.redriven_at IS NULL) AS blocked_by
           FROM highwater.dead_letters d
           LEFT JOIN highwater.events e ON e.id = d.event_id
          WHERE d.consumer = $1
            AND ($2::text IS NULL OR d.instance_id = $2)
            AND ($3::bigint IS NULL OR d.event_id = $3)
            AND ($4::text IS NULL OR e.event_type = $4)
            AND ($5::text IS NULL OR strpos(d.error, $5) > 0)
            AND ($6::timestamptz IS NULL OR d.created_at >= $6)
            AND ($7::timestamptz IS NULL OR d.created_at < $7)
          ORDER BY e.tx_id NULLS LAST, d.event_id, d.instance_id
            FOR UPDATE OF d",
    )
    .bind(&s.consumer)
    .bind(&s.instance)
    .bind(s.event)
    .bind(&s.event_type)
    .bind(&s.error_contains)
    .bind(s.since)
    .bind(s.until)
    .fetch_all(&mut *tx)
    .await?;
    if let Some(id) = s.event {
        refuse_event(&mut tx, s, id, &candidates).await?;
    }
    let mut plan =
        Plan { consumer: s.consumer.clone(), selected: Vec::new(), left_out: Vec::new(), requested_at: None };
    for c in candidates {
        // Pending, redriven or discarded already: no longer a dead letter to redrive (an --event
        // names them in its refusal above).
        if c.redrive_at.is_some() || c.redriven_at.is_some() || c.discarded_at.is_some() {
            continue;
        }
        let left_out = |why: String| LeftOut { instance_id: c.instance_id.clone(), event_id: c.event_id, why };
        let (Some(event_type), Some(stream)) = (c.event_type.clone(), c.stream.clone()) else {
            plan.left_out.push(left_out("its event was pruned: there is nothing to deliver".into()));
            continue;
        };
        if let Some(by) = c.blocked_by {
            plan.left_out.push(left_out(format!(
                "parked behind dead letter {by} of its stream (errorMode skipStream): it is redriven after that one"
            )));
            continue;
        }
        let Some(via) = via(delivery, &shards, &c.instance_id) else {
            plan.left_out.push(left_out(format!("its shard {} is gone (the instance no longer runs)", c.instance_id)));
            continue;
        };
        plan.selected.push(Selected {
            instance_id: c.instance_id,
            event_id: c.event_id,
            event_type,
            stream,
            error: c.error,
            via,
        });
    }
    if let (Some(id), Some(l)) = (s.event, plan.left_out.first()) {
        return Err(Error::refused(format!("event {id} cannot be redriven to consumer {}: {}", s.consumer, l.why))
            .with_fix(if l.why.contains("skipStream") {
                "redrive the dead letter it is parked behind; this one follows it".to_owned()
            } else if l.why.contains("pruned") {
                "nothing to deliver; `highwater consumer dead-letters` keeps its record (pruned events show as (pruned))"
                    .to_owned()
            } else {
                format!("redrive it through a running instance's shard after `highwater consumer rewind {}`, or leave it", s.consumer)
            }));
    }
    if plan.selected.is_empty() {
        let why = if plan.left_out.is_empty() {
            "no dead letter of consumer {c} that can be redriven matches".to_owned()
        } else {
            format!("none of the {} matching dead letters of consumer {{c}} can be redriven", plan.left_out.len())
        };
        return Err(Error::refused(why.replace("{c}", &s.consumer))
            .with_fix(format!("`highwater consumer dead-letters {}` lists them", s.consumer)));
    }
    if r.dry_run {
        tx.rollback().await?;
        return Ok(plan);
    }
    let (instances, ids, vias): (Vec<&str>, Vec<i64>, Vec<&str>) = {
        let mut t = (Vec::new(), Vec::new(), Vec::new());
        for x in &plan.selected {
            t.0.push(x.instance_id.as_str());
            t.1.push(x.event_id);
            t.2.push(x.via.as_str());
        }
        t
    };
    // With a rate, the i-th delivery is due i / rate seconds from now (event order).
    let delays: Vec<i64> =
        (0..ids.len()).map(|i| r.rate.map_or(0, |rate| (i as f64 * 1000.0 / rate).round() as i64)).collect();
    let at: DateTime<Utc> = sqlx::query_scalar(
        "UPDATE highwater.dead_letters d
            SET redrive_requested_at = now(), redrive_by = $2, redrive_reason = $3,
                redrive_at = now() + make_interval(secs => u.delay_ms::float8 / 1000), redrive_instance = u.via
           FROM unnest($4::text[], $5::bigint[], $6::text[], $7::bigint[]) AS u(instance_id, event_id, via, delay_ms)
          WHERE d.consumer = $1 AND d.instance_id = u.instance_id AND d.event_id = u.event_id
         RETURNING now()",
    )
    .bind(&s.consumer)
    .bind(&r.by)
    .bind(&r.reason)
    .bind(&instances)
    .bind(&ids)
    .bind(&vias)
    .bind(&delays)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .next()
    .ok_or_else(|| Error::Internal("the redrive marked no dead letter".into()))?;
    notify::control(&mut *tx, &s.consumer).await?;
    tx.commit().await?;
    plan.requested_at = Some(at);
    Ok(plan)
}

/// The refusal of an `--event` that is not a dead letter waiting to be redriven.
async fn refuse_event(conn: &mut PgConnection, s: &Selection, id: i64, found: &[Candidate]) -> Result<()> {
    let consumer = &s.consumer;
    let list = format!("`highwater consumer dead-letters {consumer}` lists its dead letters");
    if found.is_empty() {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM highwater.events WHERE id = $1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
        let any: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM highwater.dead_letters WHERE consumer = $1 AND event_id = $2)",
        )
        .bind(consumer)
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
        let problem = match (exists, any) {
            (_, true) => {
                format!("the dead letter of event {id} of consumer {consumer} does not match the other filters")
            }
            (true, false) => format!("event {id} is not a dead letter of consumer {consumer}"),
            (false, false) => {
                format!(
                    "event {id} does not exist (never appended, or pruned) and is no dead letter of consumer {consumer}"
                )
            }
        };
        return Err(Error::refused(problem).with_fix(list));
    }
    for c in found {
        if let (Some(_), Some(by), Some(at)) = (c.redrive_at, &c.redrive_by, c.redrive_requested_at) {
            return Err(Error::refused(format!(
                "a redrive of event {id} to consumer {consumer} is already pending (requested by {by} at {})",
                at.format("%Y-%m-%d %H:%M:%S")
            ))
            .with_fix(format!(
                "wait for a dispatcher of the consumer's group to deliver it (`highwater consumer dead-letters {consumer}` shows it)"
            )));
        }
        if let Some(at) = c.discarded_at {
            return Err(Error::refused(format!(
                "event {id} is no longer a dead letter of consumer {consumer}: it was discarded at {} (by {})",
                at.format("%Y-%m-%d %H:%M:%S"),
                c.discarded_by.as_deref().unwrap_or("?"),
            ))
            .with_fix(format!("nothing to do: a discarded dead letter is never delivered; {list}")));
        }
        if let Some(at) = c.redriven_at {
            return Err(Error::refused(format!(
                "event {id} is no longer a dead letter of consumer {consumer}: it was redriven at {} (by {}; parked at {})",
                at.format("%Y-%m-%d %H:%M:%S"),
                c.redrive_by.as_deref().unwrap_or("?"),
                c.created_at.format("%Y-%m-%d %H:%M:%S"),
            ))
            .with_fix(format!("nothing to do; {list}")));
        }
    }
    Ok(())
}

/// Every shard of `consumer`.
async fn shard_ids(conn: &mut PgConnection, consumer: &str) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar("SELECT instance_id FROM highwater.consumer_shards WHERE consumer = $1 ORDER BY instance_id")
        .bind(consumer)
        .fetch_all(conn)
        .await?)
}

/// The shard that delivers a dead letter parked by `instance`: that shard while it exists; for a
/// Shared consumer whose split changed since (partitions), the first shard of the current split.
fn via(delivery: Delivery, shards: &[String], instance: &str) -> Option<String> {
    if shards.iter().any(|s| s == instance) {
        return Some(instance.to_owned());
    }
    if delivery == Delivery::Shared && is_shared_instance(instance) {
        return shards.iter().find(|s| is_shared_instance(s)).cloned();
    }
    None
}

/// Where the dead letters of a request stand (`requested_at` as [`Plan::requested_at`]).
pub async fn progress(pool: &PgPool, plan: &Plan) -> Result<Progress> {
    let Some(at) = plan.requested_at else { return Ok(Progress::default()) };
    let instances: Vec<&str> = plan.selected.iter().map(|s| s.instance_id.as_str()).collect();
    let ids: Vec<i64> = plan.selected.iter().map(|s| s.event_id).collect();
    let rows: Vec<(i64, String, bool, bool)> = sqlx::query_as(
        "SELECT d.event_id, d.error, d.redrive_at IS NOT NULL, d.redriven_at IS NOT NULL
           FROM highwater.dead_letters d
           JOIN unnest($2::text[], $3::bigint[]) AS u(instance_id, event_id)
             ON d.instance_id = u.instance_id AND d.event_id = u.event_id
          WHERE d.consumer = $1 AND d.redrive_requested_at = $4
          ORDER BY d.event_id",
    )
    .bind(&plan.consumer)
    .bind(&instances)
    .bind(&ids)
    .bind(at)
    .fetch_all(pool)
    .await?;
    let mut p = Progress::default();
    for (id, error, pending, redriven) in rows {
        match (pending, redriven) {
            (true, _) => p.pending += 1,
            (false, true) => p.redriven += 1,
            (false, false) => p.failed.push((id, error)),
        }
    }
    Ok(p)
}

// ---- The dispatcher's side (the engine's dispatch::redrive). ----

/// A redrive request due for delivery through a shard.
#[derive(Debug, Clone)]
pub struct Due {
    /// The dead letter's own instance (its key), which may differ from the delivering shard.
    pub instance_id: String,
    pub event_id: i64,
}

/// The requests for the shard `(consumer, via)` due now (at most `limit`, in the order they were
/// spaced, then event order), and in how long the next one not yet due is. Nothing while the
/// shard does not deliver (dead or disabled): they wait for it.
pub async fn due(
    conn: &mut PgConnection,
    consumer: &str,
    via: &str,
    limit: i64,
) -> Result<(Vec<Due>, Option<Duration>)> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT d.instance_id, d.event_id, (extract(epoch FROM d.redrive_at - now()) * 1000)::bigint
           FROM highwater.dead_letters d
           LEFT JOIN highwater.events e ON e.id = d.event_id
          WHERE d.consumer = $1 AND d.redrive_instance = $2 AND d.redrive_at IS NOT NULL
            AND EXISTS (SELECT 1 FROM highwater.consumer_shards s
                         WHERE s.consumer = $1 AND s.instance_id = $2 AND s.status = ANY ($4))
          ORDER BY d.redrive_at, e.tx_id, d.event_id
          LIMIT $3",
    )
    .bind(consumer)
    .bind(via)
    .bind(limit)
    .bind(&crate::shards::Status::DELIVERING[..])
    .fetch_all(conn)
    .await?;
    let mut due = Vec::new();
    let mut next = None;
    for (instance_id, event_id, in_ms) in rows {
        if in_ms <= 0 && next.is_none() {
            due.push(Due { instance_id, event_id });
        } else {
            next = Some(Duration::from_millis(in_ms.max(0) as u64));
            break;
        }
    }
    if next.is_none() && due.len() as i64 == limit {
        next = Some(Duration::ZERO);
    }
    Ok((due, next))
}

/// The events of `ids`, with their bodies, by id; with `want` (a consumer's `eventVersions`,
/// `EventVersions::want`) the payloads go through `highwater.upcast_for`, as the consumer's
/// batch reads do.
pub async fn events(
    conn: &mut PgConnection,
    ids: &[i64],
    want: Option<&serde_json::Value>,
) -> Result<HashMap<i64, Event>> {
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT id, tx_id AS tx, stream_type, stream_id, stream_version, event_type, tenant_id,
                CASE WHEN $2::jsonb IS NULL THEN payload
                     ELSE highwater.upcast_for(event_type, schema_version, payload, $2::jsonb) END AS payload,
                metadata, created_at
           FROM highwater.events WHERE id = ANY($1)",
    )
    .bind(ids)
    .bind(want.map(sqlx::types::Json))
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(|r| Event::try_from(r).map(|e| (e.id, e))).collect()
}

/// Marks a pending request redriven; false when it is no longer pending through `via` (so that
/// nothing is applied twice). In a SQL sink's transaction it runs before the apply: the row
/// lock it takes makes a second delivery of the same request wait and then find it done.
///
/// The dead letters it blocked (`errorMode: skipStream`) are requested in the same statement,
/// through the same shard, by the same person: they follow it in stream order.
pub async fn mark_redriven(conn: &mut PgConnection, consumer: &str, via: &str, d: &Due) -> Result<bool> {
    let n: i64 = sqlx::query_scalar(
        "WITH done AS (
            UPDATE highwater.dead_letters SET redrive_at = NULL, redrive_instance = NULL, redriven_at = now()
             WHERE consumer = $1 AND instance_id = $2 AND event_id = $3 AND redrive_instance = $4
               AND redrive_at IS NOT NULL
            RETURNING consumer, instance_id, event_id, redrive_by),
         released AS (
            UPDATE highwater.dead_letters b
               SET redrive_at = now(), redrive_instance = $4, redrive_requested_at = now(),
                   redrive_by = done.redrive_by,
                   redrive_reason = 'after dead letter ' || done.event_id || ' (errorMode skipStream)'
              FROM done
             WHERE b.consumer = done.consumer AND b.instance_id = done.instance_id
               AND b.blocked_by = done.event_id AND b.redriven_at IS NULL AND b.redrive_at IS NULL)
         SELECT count(*) FROM done",
    )
    .bind(consumer)
    .bind(&d.instance_id)
    .bind(d.event_id)
    .bind(via)
    .fetch_one(conn)
    .await?;
    Ok(n == 1)
}

/// A failed redrive: a dead letter again, with the new error and one more attempt.
///
/// One that was blocked (`errorMode: skipStream`) blocks its stream from now on: it is no longer
/// blocked by another, and the later dead letters of its stream blocked by the same one are
/// taken back (no longer pending) and blocked by it, so that nothing of the stream passes it.
pub async fn mark_failed(conn: &mut PgConnection, consumer: &str, via: &str, d: &Due, error: &str) -> Result<bool> {
    let error: String = error.chars().take(2000).collect();
    let n: i64 = sqlx::query_scalar(
        "WITH old AS (
            SELECT blocked_by FROM highwater.dead_letters
             WHERE consumer = $1 AND instance_id = $2 AND event_id = $3),
         failed AS (
            UPDATE highwater.dead_letters
               SET redrive_at = NULL, redrive_instance = NULL, error = $5, attempts = attempts + 1,
                   blocked_by = NULL
             WHERE consumer = $1 AND instance_id = $2 AND event_id = $3 AND redrive_instance = $4
               AND redrive_at IS NOT NULL
            RETURNING event_id),
         me AS (SELECT e.tx_id, e.id FROM highwater.events e JOIN failed f ON e.id = f.event_id),
         reblocked AS (
            UPDATE highwater.dead_letters b
               SET blocked_by = $3, redrive_at = NULL, redrive_instance = NULL
              FROM old, me, highwater.events e
             WHERE old.blocked_by IS NOT NULL AND b.consumer = $1 AND b.instance_id = $2
               AND b.blocked_by = old.blocked_by AND b.redriven_at IS NULL
               AND e.id = b.event_id AND (e.tx_id, e.id) > (me.tx_id, me.id))
         SELECT count(*) FROM failed",
    )
    .bind(consumer)
    .bind(&d.instance_id)
    .bind(d.event_id)
    .bind(via)
    .bind(error)
    .fetch_one(conn)
    .await?;
    Ok(n == 1)
}

/// The dead letters of the shard `(consumer, via)` blocked by one that has been redriven since
/// (parked while the ones it blocked were still being redriven) are requested as those were.
///
/// A discarded blocker (`consumer discard`, [`super::discard`]) releases them the same way: the
/// stream goes on without it. Then the request is recorded as the discarding person's.
pub async fn release_blocked(conn: &mut PgConnection, consumer: &str, via: &str) -> Result<u64> {
    let r = sqlx::query(
        "UPDATE highwater.dead_letters b
            SET redrive_at = now(), redrive_instance = $2, redrive_requested_at = now(),
                redrive_by = CASE WHEN r.discarded_at IS NOT NULL THEN r.discarded_by ELSE r.redrive_by END,
                redrive_reason = 'after dead letter ' || r.event_id
                    || CASE WHEN r.discarded_at IS NOT NULL THEN ' was discarded' ELSE '' END
                    || ' (errorMode skipStream)'
           FROM highwater.dead_letters r
          WHERE b.consumer = $1 AND b.instance_id = $2 AND b.blocked_by IS NOT NULL
            AND b.redriven_at IS NULL AND b.redrive_at IS NULL AND b.discarded_at IS NULL
            AND r.consumer = b.consumer AND r.instance_id = b.instance_id AND r.event_id = b.blocked_by
            AND (r.redriven_at IS NOT NULL OR r.discarded_at IS NOT NULL)",
    )
    .bind(consumer)
    .bind(via)
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

/// The shards of `consumers` that have requests pending (one statement per dispatcher reload,
/// so that a lost notification delays a redrive by one refresh interval at most).
pub async fn shards_with_requests(pool: &PgPool, consumers: &[&str]) -> Result<Vec<(String, String)>> {
    Ok(sqlx::query_as(
        "SELECT DISTINCT consumer, redrive_instance FROM highwater.dead_letters
          WHERE redrive_at IS NOT NULL AND consumer = ANY($1)
         UNION
         SELECT DISTINCT b.consumer, b.instance_id FROM highwater.dead_letters b
           JOIN highwater.dead_letters r
             ON r.consumer = b.consumer AND r.instance_id = b.instance_id AND r.event_id = b.blocked_by
          WHERE b.blocked_by IS NOT NULL AND b.redriven_at IS NULL AND b.redrive_at IS NULL
            AND b.discarded_at IS NULL AND (r.redriven_at IS NOT NULL OR r.discarded_at IS NOT NULL)
            AND b.consumer = ANY($1)",
    )
    .bind(consumers)
    .fetch_all(pool)
    .await?)
}
