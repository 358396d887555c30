//! The status of an `EventConsumer`, computed from its shard rows. Pure, so it is unit-tested.
use highwater::ops::ShardStatus;
use highwater_crds::{Condition, ConsumerState, EventConsumerStatus, Problem, ShardState};

/// Condition types.
pub mod condition_type {
    pub const READY: &str = "Ready";
    pub const DEGRADED: &str = "Degraded";
    pub const SUSPENDED: &str = "Suspended";
    /// `highwater doctor`'s verdict on the database, run by the operator (docs/operations.md).
    pub const DATABASE_HEALTHY: &str = "DatabaseHealthy";
}

/// Condition reasons (besides a [`Problem`](highwater_crds::Problem)'s, which is the `Ready`
/// reason while the spec is refused).
pub mod reason {
    pub const SUSPENDED: &str = "Suspended";
    pub const SHARDS_FAILING: &str = "ShardsFailing";
    pub const NO_SHARDS: &str = "NoShards";
    pub const DELIVERING: &str = "Delivering";
    pub const SPEC_SUSPEND: &str = "SpecSuspend";
    pub const DOCTOR_OK: &str = "DoctorOk";
    pub const DOCTOR_WARNINGS: &str = "DoctorWarnings";
    pub const DOCTOR_ERRORS: &str = "DoctorErrors";
    pub const DOCTOR_NOT_RUN: &str = "DoctorNotRun";
}

/// What the operator knows beyond the shard rows.
pub struct Inputs<'a> {
    pub consumer_name: &'a str,
    pub generation: Option<i64>,
    pub suspended: bool,
    /// Why the spec could not be applied (unknown event types, a name conflict…).
    pub problem: Option<(Problem, String)>,
    pub previous: Option<&'a EventConsumerStatus>,
    pub now: &'a str,
    /// The operator's latest doctor run; `None` before the first (or with `--doctor-interval 0s`).
    pub database: Option<&'a crate::doctor::Summary>,
}

pub fn compute(rows: &[ShardStatus], i: &Inputs<'_>) -> EventConsumerStatus {
    let shards: Vec<ShardState> = rows
        .iter()
        .map(|r| ShardState {
            instance: r.instance_id.clone(),
            status: r.status.to_string(),
            cursor: r.cursor_event_id,
            lag: r.lag_events,
            attempts: r.attempts,
            last_error: r.last_error.as_ref().map(|e| e.chars().take(500).collect()),
            failing_event_id: r.failing_event_id,
            // Only while running: a finished rebuild's rate would change the status at every resync.
            rebuild: r.rebuild.as_ref().filter(|p| !p.complete).map(|p| highwater_crds::RebuildState {
                done: p.done,
                total: p.total,
                rate: (p.rate * 10.0).round() / 10.0,
                eta_seconds: p.eta_seconds.map(f64::ceil),
                complete: p.complete,
            }),
        })
        .collect();
    let dead: Vec<&ShardState> = shards.iter().filter(|s| s.status == "dead").collect();
    let failing: Vec<&ShardState> = shards.iter().filter(|s| s.status == "processing").collect();
    // Idle with an error: its passes fail before any event is blamed (a batch that cannot
    // commit, a sink that cannot be built), so the status alone would say all is well.
    let stuck: Vec<&ShardState> = shards.iter().filter(|s| s.status == "idle" && s.last_error.is_some()).collect();
    // Disabled by its receiver (`410 Gone`, docs/sinks.md "Backpressure"), not by an operator.
    let gone: Vec<&ShardState> = shards.iter().filter(|s| gone_shard(s)).collect();
    let degraded = !dead.is_empty() || !failing.is_empty() || !stuck.is_empty() || !gone.is_empty();
    let state = match (&i.problem, i.suspended) {
        (Some((problem, _)), _) => problem.state(),
        (None, true) => ConsumerState::Suspended,
        (None, false) if degraded => ConsumerState::Degraded,
        (None, false) if shards.is_empty() => ConsumerState::Pending,
        _ => ConsumerState::Ready,
    };
    let degraded_msg = dead
        .iter()
        .map(|s| format!("shard {} is dead on event {}", s.instance, s.failing_event_id.unwrap_or_default()))
        .chain(
            failing
                .iter()
                .map(|s| format!("shard {} is retrying event {}", s.instance, s.failing_event_id.unwrap_or_default())),
        )
        .chain(
            stuck
                .iter()
                .map(|s| format!("shard {} is stuck: {}", s.instance, s.last_error.as_deref().unwrap_or_default())),
        )
        .chain(gone.iter().map(|s| {
            format!("shard {} is disabled by its receiver: {}", s.instance, s.last_error.as_deref().unwrap_or_default())
        }))
        .collect::<Vec<_>>()
        .join("; ");
    let (ready_reason, ready_msg) = match (&i.problem, state) {
        (Some((problem, msg)), _) => (problem.as_str(), msg.clone()),
        (None, ConsumerState::Suspended) => (reason::SUSPENDED, "spec.suspend is true".into()),
        (None, ConsumerState::Degraded) => (reason::SHARDS_FAILING, degraded_msg.clone()),
        (None, ConsumerState::Pending) => (reason::NO_SHARDS, "no dispatcher pod of the group runs yet".into()),
        _ => (reason::DELIVERING, format!("{} shard(s) delivering", shards.len())),
    };
    let conditions = vec![
        condition(i, condition_type::READY, state == ConsumerState::Ready, ready_reason, &ready_msg),
        condition(i, condition_type::DEGRADED, degraded, reason::SHARDS_FAILING, &degraded_msg),
        condition(
            i,
            condition_type::SUSPENDED,
            i.suspended,
            reason::SPEC_SUSPEND,
            if i.suspended { "spec.suspend is true" } else { "" },
        ),
        database_condition(i),
    ];
    EventConsumerStatus {
        partitions: partitions(&shards, rows),
        observed_generation: i.generation,
        state: Some(state),
        consumer_name: Some(i.consumer_name.to_owned()),
        total_lag: shards.iter().map(|s| s.lag).sum(),
        shards,
        conditions,
        handled_restart: i.previous.and_then(|p| p.handled_restart.clone()),
        handled_skip: i.previous.and_then(|p| p.handled_skip.clone()),
        handled_rebuild: i.previous.and_then(|p| p.handled_rebuild.clone()),
        handled_redrive: i.previous.and_then(|p| p.handled_redrive.clone()),
        handled_discard: i.previous.and_then(|p| p.handled_discard.clone()),
        handled_replay: i.previous.and_then(|p| p.handled_replay.clone()),
        rebuild: rows.iter().find_map(|r| r.rebuild.as_ref().filter(|p| !p.complete)).map(|p| p.to_string()),
    }
}

/// `busy/n busy` for a partitioned consumer: partitions with events waiting or a failing
/// event. During a change of the count the old split is shown until the switch, with the target:
/// `2/8 busy, to 4`.
fn partitions(shards: &[ShardState], rows: &[ShardStatus]) -> Option<String> {
    let changing = rows.iter().find(|r| r.barrier_event_id.is_some()).map(|r| r.partitions);
    let parts: Vec<&ShardState> = shards
        .iter()
        .filter(|s| highwater_crds::parse_partition_instance(&s.instance).is_some() || changing.is_some())
        .collect();
    if parts.is_empty() {
        return None;
    }
    let busy = parts.iter().filter(|s| s.lag > 0 || s.status == "processing" || s.status == "dead").count();
    Some(match changing {
        Some(n) => format!("{busy}/{} busy, to {n}", parts.len()),
        None => format!("{busy}/{} busy", parts.len()),
    })
}

/// `True` when doctor found nothing, `False` with its findings and fixes, `Unknown` before it ran.
/// Warnings count: a transaction pinning the fence stalls every consumer's delivery.
fn database_condition(i: &Inputs<'_>) -> Condition {
    use highwater::doctor::Level;
    let Some(s) = i.database else {
        return condition_with(
            i,
            condition_type::DATABASE_HEALTHY,
            "Unknown",
            reason::DOCTOR_NOT_RUN,
            "the operator has not run highwater doctor yet",
        );
    };
    let (status, why) = match s.level {
        Level::Ok => ("True", reason::DOCTOR_OK),
        Level::Warning => ("False", reason::DOCTOR_WARNINGS),
        Level::Error => ("False", reason::DOCTOR_ERRORS),
    };
    condition_with(i, condition_type::DATABASE_HEALTHY, status, why, &s.message())
}

/// Keeps `lastTransitionTime` while the condition's status is unchanged.
fn condition(i: &Inputs<'_>, type_: &str, on: bool, reason: &str, message: &str) -> Condition {
    condition_with(i, type_, if on { "True" } else { "False" }, reason, message)
}

fn condition_with(i: &Inputs<'_>, type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    let since = i
        .previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == type_ && c.status == status))
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| i.now.to_owned());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: since,
        observed_generation: i.generation,
    }
}

/// Shards that became dead since the previous status: each gets a Warning event.
/// A shard the dispatcher disabled because the webhook receiver answered `410 Gone`.
fn gone_shard(s: &ShardState) -> bool {
    s.status == "disabled" && s.last_error.as_deref().is_some_and(|e| e.contains("HTTP 410 Gone"))
}

/// Shards disabled by their receiver (`410 Gone`) since the previous status: one Event each.
pub fn newly_gone<'a>(prev: Option<&EventConsumerStatus>, now: &'a EventConsumerStatus) -> Vec<&'a ShardState> {
    now.shards
        .iter()
        .filter(|s| gone_shard(s))
        .filter(|s| !prev.is_some_and(|p| p.shards.iter().any(|o| o.instance == s.instance && gone_shard(o))))
        .collect()
}

pub fn newly_dead<'a>(prev: Option<&EventConsumerStatus>, now: &'a EventConsumerStatus) -> Vec<&'a ShardState> {
    now.shards
        .iter()
        .filter(|s| s.status == "dead")
        .filter(|s| !prev.is_some_and(|p| p.shards.iter().any(|o| o.instance == s.instance && o.status == "dead")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(instance: &str, status: &str, lag: i64) -> ShardStatus {
        ShardStatus {
            consumer: "c".into(),
            instance_id: instance.into(),
            delivery: highwater_crds::Delivery::PerInstance,
            group: "default".into(),
            status: status.parse().unwrap(),
            cursor_event_id: 5,
            cursor_tx: highwater::Xid8(9),
            lag_events: lag,
            lag_seconds: None,
            held_events: 0,
            held_by_fence: None,
            filter: None,
            attempts: if status == "dead" { 3 } else { 0 },
            last_error: (status == "dead").then(|| "boom".into()),
            failing_event_id: (status == "dead").then_some(6),
            next_attempt_at: None,
            heartbeat_at: None,
            delivered_count: 5,
            bootstrap_pending: false,
            partitions: 1,
            barrier_event_id: None,
            rebuild_done: None,
            rebuild_total: None,
            rebuild_seconds: None,
            rebuild_complete: None,
            rebuild: None,
            paused_until: None,
            pause_reason: None,
            rate_limited_until: None,
            throttled_seconds: 0.0,
        }
    }

    fn inputs<'a>(previous: Option<&'a EventConsumerStatus>, now: &'a str) -> Inputs<'a> {
        Inputs {
            consumer_name: "c",
            generation: Some(2),
            suspended: false,
            problem: None,
            previous,
            now,
            database: None,
        }
    }

    #[test]
    fn partitions_column_counts_busy_partitions_and_shows_a_change() {
        let none = compute(&[row("d-0", "idle", 3)], &inputs(None, "t"));
        assert_eq!(none.partitions, None, "no partitions, no column value");
        let mut rows = vec![
            row("__shared__/p0of3", "idle", 0),
            row("__shared__/p1of3", "idle", 4),
            row("__shared__/p2of3", "dead", 0),
        ];
        assert_eq!(compute(&rows, &inputs(None, "t")).partitions.as_deref(), Some("2/3 busy"));
        for r in &mut rows {
            r.partitions = 5;
            r.barrier_event_id = Some(40);
        }
        assert_eq!(compute(&rows, &inputs(None, "t")).partitions.as_deref(), Some("2/3 busy, to 5"));
        let mut one = row("__shared__", "idle", 2);
        (one.partitions, one.barrier_event_id) = (4, Some(7));
        assert_eq!(compute(&[one], &inputs(None, "t")).partitions.as_deref(), Some("1/1 busy, to 4"));
    }

    #[test]
    fn ready_when_every_shard_delivers() {
        let s = compute(&[row("a", "idle", 2), row("b", "idle", 3)], &inputs(None, "t1"));
        assert_eq!(s.state, Some(ConsumerState::Ready));
        assert_eq!(s.total_lag, 5);
        assert_eq!(s.conditions[0].status, "True");
        assert_eq!(s.conditions[1].status, "False");
    }

    #[test]
    fn a_dead_shard_degrades_and_is_reported_once() {
        let first = compute(&[row("a", "idle", 0), row("b", "dead", 4)], &inputs(None, "t1"));
        assert_eq!(first.state, Some(ConsumerState::Degraded));
        assert!(first.conditions[1].message.contains("shard b is dead on event 6"));
        assert_eq!(newly_dead(None, &first).len(), 1);
        let second = compute(&[row("a", "idle", 0), row("b", "dead", 4)], &inputs(Some(&first), "t2"));
        assert!(newly_dead(Some(&first), &second).is_empty());
        assert_eq!(second.conditions[1].last_transition_time, "t1", "unchanged conditions keep their time");
    }

    #[test]
    fn a_shard_disabled_by_a_410_degrades_and_is_reported_once() {
        let mut gone = row("__shared__", "disabled", 4);
        gone.last_error = Some("webhook: HTTP 410 Gone, empty body (410 Gone: …)".into());
        let first = compute(std::slice::from_ref(&gone), &inputs(None, "t1"));
        assert_eq!(first.state, Some(ConsumerState::Degraded));
        assert!(
            first.conditions[1]
                .message
                .contains("shard __shared__ is disabled by its receiver: webhook: HTTP 410 Gone")
        );
        assert_eq!(newly_gone(None, &first).len(), 1);
        let second = compute(&[gone], &inputs(Some(&first), "t2"));
        assert!(newly_gone(Some(&first), &second).is_empty(), "reported once");
        // Disabled by an operator: not the receiver's doing.
        let s = compute(&[row("a", "disabled", 0)], &inputs(None, "t1"));
        assert!(newly_gone(None, &s).is_empty());
    }

    #[test]
    fn an_idle_shard_whose_passes_fail_degrades_with_the_error() {
        let mut stuck = row("b", "idle", 4);
        stuck.last_error = Some("pass failed: duplicate key value violates unique constraint".into());
        let s = compute(&[row("a", "idle", 0), stuck], &inputs(None, "t1"));
        assert_eq!(s.state, Some(ConsumerState::Degraded));
        assert_eq!(s.conditions[1].status, "True");
        assert!(
            s.conditions[1].message.contains("shard b is stuck: pass failed: duplicate key"),
            "{}",
            s.conditions[1].message
        );
        assert_eq!(s.conditions[0].status, "False", "not Ready while a shard is stuck");
    }

    #[test]
    fn problems_and_suspension_win() {
        let mut i = inputs(None, "t1");
        i.problem = Some((Problem::Conflict, "claimed by kubernetes:x/y".into()));
        assert_eq!(compute(&[], &i).state, Some(ConsumerState::Conflict));
        let mut i = inputs(None, "t1");
        i.suspended = true;
        let s = compute(&[row("a", "disabled", 1)], &i);
        assert_eq!(s.state, Some(ConsumerState::Suspended));
        assert_eq!(s.conditions[2].status, "True");
        assert_eq!(compute(&[], &inputs(None, "t")).state, Some(ConsumerState::Pending));
    }

    #[test]
    fn database_healthy_follows_the_doctor_and_keeps_its_transition_time() {
        use highwater::doctor::Finding;
        let healthy = |s: &EventConsumerStatus| {
            let c = s.conditions.iter().find(|c| c.type_ == condition_type::DATABASE_HEALTHY).unwrap();
            (c.status.clone(), c.reason.clone(), c.message.clone(), c.last_transition_time.clone())
        };
        let before = compute(&[row("a", "idle", 0)], &inputs(None, "t0"));
        assert_eq!(healthy(&before).0, "Unknown", "not run yet is not healthy");

        let ok = crate::doctor::Summary::of(vec![Finding::ok("server", "PostgreSQL 15")]);
        let mut i = inputs(Some(&before), "t1");
        i.database = Some(&ok);
        let first = compute(&[row("a", "idle", 0)], &i);
        assert_eq!(healthy(&first).0, "True");
        assert_eq!(healthy(&first).1, reason::DOCTOR_OK);

        let pinned = crate::doctor::Summary::of(vec![Finding::warning("fence", "pid 7 holds it", "end it")]);
        let mut i = inputs(Some(&first), "t2");
        i.database = Some(&pinned);
        let second = compute(&[row("a", "idle", 0)], &i);
        let (status, why, message, since) = healthy(&second);
        assert_eq!((status.as_str(), why.as_str(), since.as_str()), ("False", reason::DOCTOR_WARNINGS, "t2"));
        assert_eq!(message, "fence: pid 7 holds it (fix: end it)");
        assert_eq!(second.state, Some(ConsumerState::Ready), "the database's health does not change the state");

        let mut i = inputs(Some(&second), "t3");
        i.database = Some(&pinned);
        assert_eq!(healthy(&compute(&[row("a", "idle", 0)], &i)).3, "t2", "unchanged keeps its time");
    }
}
