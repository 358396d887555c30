//! Shard transitions an operator asks for: restart, skip, disable, enable (rewind in `rewind.rs`).
//!
//! Each is one conditional UPDATE in a transaction that also sends `highwater_control`, so
//! running dispatchers look at the shard at once. Dispatchers move cursors only with updates
//! conditional on the cursor and status they read, so a change made here wins over a pass that
//! is already running: that pass's update finds the shard changed and applies nothing.
use std::fmt;

use sqlx::{PgPool, Row};

use super::{
    audit::{AUDIT_CTE, Audit},
    scope::{self, Scope, ShardState},
};
use crate::{Error, Position, Result, notify, shards::Status};

/// What a command did to one shard.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Transition {
    pub consumer: String,
    pub instance_id: String,
    #[serde(flatten)]
    pub action: Action,
    pub from_status: Status,
    pub to_status: Status,
    pub cursor_before: Position,
    pub cursor_after: Position,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Action {
    Restarted,
    Skipped {
        event_id: i64,
    },
    Disabled,
    Enabled,
    /// `to` as given: `earliest`, `latest`, an event id or a time.
    Rewound {
        to: String,
    },
}

impl Action {
    /// The name in `highwater.shard_changes.action`.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Restarted => "restarted",
            Action::Skipped { .. } => "skipped",
            Action::Disabled => "disabled",
            Action::Enabled => "enabled",
            Action::Rewound { .. } => "rewound",
        }
    }

    fn detail(&self) -> Option<String> {
        match self {
            Action::Rewound { to } => Some(format!("to {to}")),
            _ => None,
        }
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, i) = (&self.consumer, &self.instance_id);
        match &self.action {
            Action::Restarted => write!(f, "eventconsumer/{c} restarted (instance {i})"),
            Action::Skipped { event_id } => write!(
                f,
                "eventconsumer/{c} skipped event {event_id} (instance {i}; cursor {} -> {}; now {})",
                self.cursor_before,
                self.cursor_after,
                self.to_status.as_str()
            ),
            Action::Disabled => {
                write!(f, "eventconsumer/{c} disabled (instance {i}; was {})", self.from_status.as_str())
            }
            Action::Enabled => write!(f, "eventconsumer/{c} enabled (instance {i})"),
            Action::Rewound { to } => write!(
                f,
                "eventconsumer/{c} rewound to {to} (instance {i}; cursor {} -> {}; now {})",
                self.cursor_before,
                self.cursor_after,
                self.to_status.as_str()
            ),
        }
    }
}

/// One transition, as SQL fragments over the shard `s` (and the event `e` when `join_event`).
pub(super) struct Change {
    pub verb: &'static str,
    /// Condition on `s` under which the transition applies.
    pub applies: &'static str,
    /// The SET list; `$3` is an event id, `$4`/`$5` a target position (rewind).
    /// Both name states as parameters, bound by [`execute`]: `$6` idle, `$7` dead, `$8` disabled.
    pub set: &'static str,
    /// Joins `e`, the shard's failing event (skip needs its position).
    pub join_event: bool,
    /// Records the failing event in `dead_letters` (skip).
    pub park: bool,
    pub event_id: Option<i64>,
    pub target: Option<Position>,
    pub action: Action,
}

/// Runs `change` on every shard in scope for which it applies, recording each in
/// `highwater.shard_changes` with `audit`, or refuses with each shard's reason (`why_not`) when it
/// applies to none.
pub(super) async fn execute(
    pool: &PgPool,
    consumer: &str,
    instance: Option<&str>,
    change: Change,
    audit: &Audit,
    check: impl Fn(&Scope) -> Result<()>,
    why_not: impl Fn(&Scope, &ShardState) -> String,
) -> Result<Vec<Transition>> {
    let mut tx = pool.begin().await?;
    let scope = scope::resolve(&mut tx, consumer, instance).await?;
    check(&scope)?;
    // The CTE locks the rows it selects (waiting for, and re-checking, a concurrent update), so
    // the "before" values reported are the ones this update replaced.
    // The position check keeps a stale failing_event_id from ever moving a cursor backwards.
    let join = if change.join_event {
        "JOIN highwater.events e ON e.id = prev.failing_event_id AND (e.tx_id, e.id) > (prev.cursor_tx, prev.cursor_id)"
    } else {
        ""
    };
    // A skipped event is parked in dead_letters with its last error, as errorMode skip does.
    let park = if change.park {
        ", parked AS (
             INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error)
             SELECT consumer, instance_id, failing_event_id, prev_attempts,
                    coalesce(prev_error, 'no error recorded') || ' (skipped by an operator)'
               FROM upd
             ON CONFLICT DO NOTHING)"
    } else {
        ""
    };
    let sql = format!(
        "WITH prev AS (
             SELECT s.consumer, s.instance_id, s.status, s.cursor_tx, s.cursor_id, s.failing_event_id,
                    s.attempts, s.last_error
               FROM highwater.consumer_shards s
              WHERE s.consumer = $1 AND ($2::text IS NULL OR s.instance_id = $2) AND ({applies})
                FOR UPDATE),
         upd AS (
             UPDATE highwater.consumer_shards s SET {set}, updated_at = now()
               FROM prev {join}
              WHERE s.consumer = prev.consumer AND s.instance_id = prev.instance_id
             RETURNING s.consumer, s.instance_id, prev.status AS from_status, s.status AS to_status,
                       prev.cursor_tx AS from_tx, prev.cursor_id AS from_id,
                       s.cursor_tx AS to_tx, s.cursor_id AS to_id, prev.failing_event_id,
                       prev.attempts AS prev_attempts, prev.last_error AS prev_error)
         {park}
         {AUDIT_CTE}
         SELECT * FROM upd",
        applies = change.applies,
        set = change.set,
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(&scope.consumer)
        .bind(&scope.instance)
        .bind(change.event_id)
        .bind(change.target.map(|p| p.xid8()))
        .bind(change.target.map(|p| p.id))
        .bind(Status::Idle)
        .bind(Status::Dead)
        .bind(Status::Disabled)
        .bind(change.action.name())
        .bind(change.action.detail())
        .bind(&audit.by)
        .bind(&audit.reason)
        .fetch_all(&mut *tx)
        .await?;
    if rows.is_empty() {
        let states = scope::states(&mut tx, &scope).await?;
        return Err(scope::not_applicable(change.verb, &scope, &states, why_not));
    }
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let action = match &change.action {
            Action::Skipped { .. } => {
                Action::Skipped { event_id: r.try_get::<Option<i64>, _>("failing_event_id")?.unwrap_or(0) }
            }
            a => a.clone(),
        };
        out.push(Transition {
            consumer: scope.consumer.clone(),
            instance_id: r.try_get("instance_id")?,
            action,
            from_status: r.try_get("from_status")?,
            to_status: r.try_get("to_status")?,
            cursor_before: Position::from((r.try_get("from_tx")?, r.try_get("from_id")?)),
            cursor_after: Position::from((r.try_get("to_tx")?, r.try_get("to_id")?)),
        });
    }
    out.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    notify::control(&mut *tx, &scope.consumer).await?;
    tx.commit().await?;
    Ok(out)
}

fn no_check(_: &Scope) -> Result<()> {
    Ok(())
}

/// Resumes dead shards: the cursor stays before the failing event, which is tried again with a
/// fresh attempt count.
pub async fn restart(pool: &PgPool, consumer: &str, instance: Option<&str>, audit: &Audit) -> Result<Vec<Transition>> {
    let change = Change {
        verb: "restart",
        applies: "s.status = $7",
        set: "status = $6, attempts = 0, next_attempt_at = NULL",
        join_event: false,
        park: false,
        event_id: None,
        target: None,
        action: Action::Restarted,
    };
    execute(pool, consumer, instance, change, audit, no_check, |sc, s| {
        let (c, flag) = (&sc.consumer, sc.instance_flag(&s.instance_id));
        match s.status {
            Status::Idle => "is idle, not dead: it is delivering, there is nothing to restart".into(),
            Status::Processing => format!(
                "is processing, not dead: it retries event {} on its own (attempt {} failed so far)\n    \
                 to move past that event instead: `highwater consumer skip {c}{flag}`",
                s.failing_event_id.unwrap_or_default(),
                s.attempts
            ),
            Status::Disabled => {
                format!("is disabled, not dead: restart resumes only dead shards\n    fix: `highwater consumer enable {c}{flag}`")
            }
            Status::Dead => "is dead but changed while restarting; run the command again".into(),
        }
    })
    .await
}

/// Moves past the failing event only: the cursor goes to that event, so the next pass starts
/// after it. With `event`, refuses unless the shard is failing on exactly that event.
pub async fn skip(
    pool: &PgPool,
    consumer: &str,
    instance: Option<&str>,
    event: Option<i64>,
    audit: &Audit,
) -> Result<Vec<Transition>> {
    let change = Change {
        verb: "skip the failing event of",
        applies: "s.failing_event_id IS NOT NULL AND ($3::bigint IS NULL OR s.failing_event_id = $3)",
        set: "cursor_tx = e.tx_id, cursor_id = e.id,
              status = CASE WHEN s.status = $8 THEN $8 ELSE $6 END,
              attempts = 0, last_error = NULL, failing_event_id = NULL, next_attempt_at = NULL",
        join_event: true,
        park: true,
        event_id: event,
        target: None,
        action: Action::Skipped { event_id: 0 },
    };
    execute(pool, consumer, instance, change, audit, no_check, |sc, s| {
        let (c, flag) = (&sc.consumer, sc.instance_flag(&s.instance_id));
        match (s.failing_event_id, event) {
            (None, _) => format!(
                "has no failing event (status {}): skip moves past a failing event only\n    to move the cursor \
                 anyway: `highwater consumer rewind {c}{flag} --to EVENT_ID|TIME|latest`",
                s.status.as_str()
            ),
            (Some(actual), Some(wanted)) if actual != wanted => format!(
                "is failing on event {actual}, not {wanted}\n    if that is the one to skip: `highwater consumer \
                 skip {c}{flag} --event {actual}`"
            ),
            (Some(actual), _) if !s.failing_event_exists => format!(
                "is failing on event {actual}, which no longer exists (pruned)\n    fix: `highwater consumer \
                 rewind {c}{flag} --to TIME|latest`"
            ),
            (Some(_), _) => "changed while skipping; run the command again".into(),
        }
    })
    .await
}

/// Stops delivery to shards: nothing is delivered, the cursor stays, nothing is lost (but
/// `events prune` no longer waits for a disabled shard).
pub async fn disable(pool: &PgPool, consumer: &str, instance: Option<&str>, audit: &Audit) -> Result<Vec<Transition>> {
    let change = Change {
        verb: "disable",
        applies: "s.status <> $8",
        set: "status = $8",
        join_event: false,
        park: false,
        event_id: None,
        target: None,
        action: Action::Disabled,
    };
    execute(pool, consumer, instance, change, audit, no_check, |_, _| "is already disabled (nothing to do)".into())
        .await
}

/// Resumes disabled shards from their cursors. Refused while the consumer's definition says
/// `suspend: true`: the definition is the switch then, and would contradict the shards.
pub async fn enable(pool: &PgPool, consumer: &str, instance: Option<&str>, audit: &Audit) -> Result<Vec<Transition>> {
    let change = Change {
        verb: "enable",
        applies: "s.status = $8 AND NOT s.bootstrap_pending",
        set: "status = $6",
        join_event: false,
        park: false,
        event_id: None,
        target: None,
        action: Action::Enabled,
    };
    let suspended = |sc: &Scope| {
        if sc.suspended {
            return Err(Error::refused(format!(
                "cannot enable consumer {}: its definition says suspend: true",
                sc.consumer
            ))
            .with_fix("set suspend: false and `highwater consumer apply` it (that enables every shard)"));
        }
        Ok(())
    };
    execute(pool, consumer, instance, change, audit, suspended, |sc, s| {
        let (c, flag) = (&sc.consumer, sc.instance_flag(&s.instance_id));
        match s.status {
            Status::Dead => {
                format!("is dead, not disabled\n    to resume it: `highwater consumer restart {c}{flag}`")
            }
            st => format!("is {}, not disabled (nothing to do)", st.as_str()),
        }
    })
    .await
}
