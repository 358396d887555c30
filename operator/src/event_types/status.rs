//! The status of an `EventType`, computed from the registry's answer. Pure, so it is unit-tested.
use highwater_crds::{Condition, EventTypeStatus, VersionStatus};

pub mod condition_type {
    pub const READY: &str = "Ready";
    pub const REFUSED: &str = "Refused";
}

pub mod reason {
    /// Every version of the spec is registered.
    pub const REGISTERED: &str = "Registered";
    /// A version was refused; the registry is unchanged.
    pub const VERSION_REFUSED: &str = "VersionRefused";
    /// Another resource declares the same event type.
    pub const CONFLICT: &str = "Conflict";
}

/// Why the spec is not what the registry holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    Refused(String),
    /// Another `EventType` (namespace/name) owns the type.
    Conflict(String),
}

pub struct Inputs<'a> {
    pub generation: Option<i64>,
    pub problem: Option<&'a Problem>,
    /// The registry's versions with their stored events (empty on a conflict).
    pub counts: &'a [VersionStatus],
    pub previous: Option<&'a EventTypeStatus>,
    pub now: &'a str,
}

pub fn compute(i: &Inputs<'_>) -> EventTypeStatus {
    let mut versions = i.counts.to_vec();
    versions.sort_by_key(|v| v.version);
    let (ready, refused) = match i.problem {
        None => (
            condition(i, condition_type::READY, true, reason::REGISTERED, &registered(&versions)),
            condition(i, condition_type::REFUSED, false, reason::REGISTERED, ""),
        ),
        Some(Problem::Refused(m)) => (
            condition(i, condition_type::READY, false, reason::VERSION_REFUSED, m),
            condition(i, condition_type::REFUSED, true, reason::VERSION_REFUSED, m),
        ),
        Some(Problem::Conflict(m)) => (
            condition(i, condition_type::READY, false, reason::CONFLICT, m),
            condition(i, condition_type::REFUSED, true, reason::CONFLICT, m),
        ),
    };
    let by_version = versions.iter().map(|v| format!("v{}={}", v.version, v.events)).collect::<Vec<_>>().join(" ");
    EventTypeStatus {
        observed_generation: i.generation,
        latest_version: versions.last().map(|v| v.version),
        total_events: versions.iter().map(|v| v.events).sum(),
        events_by_version: (!by_version.is_empty()).then_some(by_version),
        versions,
        conditions: vec![ready, refused],
    }
}

fn registered(versions: &[VersionStatus]) -> String {
    match versions.last() {
        Some(v) => format!("{} version(s) registered, latest {}", versions.len(), v.version),
        None => "registered".to_owned(),
    }
}

/// Whether `now` newly reports `problem` (a different message than before counts as new):
/// each refusal gets one Warning event, not one per resync.
pub fn newly_refused(prev: Option<&EventTypeStatus>, now: &EventTypeStatus) -> bool {
    let refused = |s: &EventTypeStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == condition_type::REFUSED && c.status == "True")
            .map(|c| c.message.clone())
    };
    match refused(now) {
        None => false,
        Some(m) => prev.and_then(refused) != Some(m),
    }
}

/// Versions the registry holds now and did not at the previous status.
pub fn newly_registered(prev: Option<&EventTypeStatus>, now: &EventTypeStatus) -> Vec<i32> {
    now.versions
        .iter()
        .map(|v| v.version)
        .filter(|v| !prev.is_some_and(|p| p.versions.iter().any(|o| o.version == *v)))
        .collect()
}

/// Keeps `lastTransitionTime` while the condition's status is unchanged.
fn condition(i: &Inputs<'_>, type_: &str, on: bool, reason: &str, message: &str) -> Condition {
    let status = if on { "True" } else { "False" };
    let since = i
        .previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == type_ && c.status == status))
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| i.now.to_owned());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.chars().take(2000).collect(),
        last_transition_time: since,
        observed_generation: i.generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts() -> Vec<VersionStatus> {
        vec![VersionStatus { version: 2, events: 3 }, VersionStatus { version: 1, events: 10 }]
    }

    fn inputs<'a>(
        problem: Option<&'a Problem>,
        counts: &'a [VersionStatus],
        previous: Option<&'a EventTypeStatus>,
        now: &'a str,
    ) -> Inputs<'a> {
        Inputs { generation: Some(3), problem, counts, previous, now }
    }

    fn cond<'a>(s: &'a EventTypeStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn applied_reports_latest_and_events_per_version() {
        let c = counts();
        let s = compute(&inputs(None, &c, None, "t0"));
        assert_eq!(s.latest_version, Some(2));
        assert_eq!(s.total_events, 13);
        assert_eq!(s.events_by_version.as_deref(), Some("v1=10 v2=3"));
        assert_eq!(s.versions[0], VersionStatus { version: 1, events: 10 });
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "Refused").status, "False");
        assert_eq!(s.observed_generation, Some(3));
        assert!(!newly_refused(None, &s));
        assert_eq!(newly_registered(None, &s), vec![1, 2]);
    }

    #[test]
    fn a_refusal_keeps_the_registry_s_versions_and_is_reported_once() {
        let c = counts();
        let before = compute(&inputs(None, &c, None, "t0"));
        let p = Problem::Refused("version 3 is not backward compatible with version 2\n  fix: …".into());
        let s = compute(&inputs(Some(&p), &c, Some(&before), "t1"));
        assert_eq!(s.latest_version, Some(2), "the registry is unchanged");
        let refused = cond(&s, "Refused");
        assert_eq!((refused.status.as_str(), refused.reason.as_str()), ("True", "VersionRefused"));
        assert!(refused.message.contains("version 3"));
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(cond(&s, "Ready").last_transition_time, "t1");
        assert!(newly_refused(Some(&before), &s));
        assert!(newly_registered(Some(&before), &s).is_empty());
        // The same refusal at the next resync: no new event, times kept, status equal.
        let again = compute(&inputs(Some(&p), &c, Some(&s), "t2"));
        assert!(!newly_refused(Some(&s), &again));
        assert_eq!(again, s);
        // Another refusal is reported.
        let other = Problem::Refused("version 4 differs".into());
        let s4 = compute(&inputs(Some(&other), &c, Some(&s), "t3"));
        assert!(newly_refused(Some(&s), &s4));
    }

    #[test]
    fn a_conflict_reports_no_versions() {
        let p = Problem::Conflict("shop/orders declares OrderPlaced".into());
        let s = compute(&inputs(Some(&p), &[], None, "t0"));
        assert_eq!(s.latest_version, None);
        assert_eq!(s.events_by_version, None);
        assert_eq!(cond(&s, "Ready").reason, "Conflict");
    }
}
