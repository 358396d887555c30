//! One log line a minute while the fence holds this dispatcher's events back, naming the
//! transaction that holds it: lag that grows with no failure then has its cause in the log
//! (issue 44). Fed by the gauge refresh, which reads the shards' status anyway.
use std::time::{Duration, Instant};

use highwater_store::{
    Xid8,
    ops::{FenceHolder, ShardStatus},
};

/// A holder is named once it has held the fence this long: writers' own transactions hold it
/// for milliseconds all the time.
const NOTABLE: Duration = Duration::from_secs(5);
/// At most one line this often while it lasts.
const EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct HeldLog {
    /// The fence seen holding events back, and since when.
    seen: Option<(Xid8, Instant)>,
    /// When the last line was written (`None`: nothing said since the fence last moved on).
    logged: Option<Instant>,
}

/// What to say after a look.
#[derive(Debug, PartialEq)]
enum Say {
    Nothing,
    Held { holder: FenceHolder, events: i64 },
    Released,
}

impl HeldLog {
    /// Logs what the shards' status says about the fence, at most once a minute.
    pub fn observe(&mut self, rows: &[ShardStatus]) {
        let events = rows.iter().filter(|r| r.held_by_fence.is_some()).map(|r| r.held_events).sum();
        let holder = rows.iter().find_map(|r| r.held_by_fence.as_ref());
        match self.step(holder, events, Instant::now()) {
            Say::Nothing => {}
            Say::Held { holder, events } => tracing::warn!(
                pid = holder.pid,
                application = holder.application.as_deref().unwrap_or(""),
                transaction_seconds = holder.seconds,
                events,
                "held by the fence: {holder}: {events} event(s) of this dispatcher's consumers committed after it \
                 began wait until it ends; fix: {}",
                holder.fix()
            ),
            Say::Released => tracing::info!("the fence moved on: the events it held back are being delivered"),
        }
    }

    fn step(&mut self, holder: Option<&FenceHolder>, events: i64, now: Instant) -> Say {
        let Some(h) = holder else {
            self.seen = None;
            return match self.logged.take() {
                Some(_) => Say::Released,
                None => Say::Nothing,
            };
        };
        let since = match self.seen {
            Some((xid, since)) if xid == h.xid => since,
            _ => {
                self.seen = Some((h.xid, now));
                now
            }
        };
        // Its own age where the role can see it, else how long this dispatcher has seen it.
        let held = now.duration_since(since).max(Duration::from_secs_f64(h.seconds.unwrap_or(0.0).max(0.0)));
        let due = self.logged.is_none_or(|at| now.duration_since(at) >= EVERY);
        if held < NOTABLE || !due {
            return Say::Nothing;
        }
        self.logged = Some(now);
        Say::Held { holder: h.clone(), events }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(xid: u64, seconds: Option<f64>) -> FenceHolder {
        FenceHolder {
            xid: Xid8(xid),
            pid: Some(42),
            application: Some("forgotten-psql".into()),
            state: seconds.map(|_| "idle in transaction".into()),
            database: Some("app".into()),
            seconds,
            prepared: None,
        }
    }

    #[test]
    fn once_a_minute_while_it_lasts_and_once_when_it_ends() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut log = HeldLog::default();
        // Young and unseen before: not yet.
        assert_eq!(log.step(Some(&holder(7, Some(1.0))), 3, at(0)), Say::Nothing);
        // Seen for 5 s: named.
        assert!(matches!(log.step(Some(&holder(7, Some(6.0))), 3, at(5)), Say::Held { events: 3, .. }));
        // Not again within the minute, another holder included.
        assert_eq!(log.step(Some(&holder(7, Some(30.0))), 3, at(30)), Say::Nothing);
        assert_eq!(log.step(Some(&holder(9, Some(50.0))), 3, at(50)), Say::Nothing);
        assert!(matches!(log.step(Some(&holder(9, Some(65.0))), 4, at(65)), Say::Held { events: 4, .. }));
        // It ends: said once.
        assert_eq!(log.step(None, 0, at(70)), Say::Released);
        assert_eq!(log.step(None, 0, at(75)), Say::Nothing);
    }

    #[test]
    fn an_age_it_cannot_see_counts_from_when_it_was_first_seen() {
        let t0 = Instant::now();
        let mut log = HeldLog::default();
        assert_eq!(log.step(Some(&holder(7, None)), 1, t0), Say::Nothing);
        assert_eq!(log.step(Some(&holder(7, None)), 1, t0 + Duration::from_secs(4)), Say::Nothing);
        assert!(matches!(log.step(Some(&holder(7, None)), 1, t0 + Duration::from_secs(5)), Say::Held { .. }));
        // A holder that passed unnoticed says nothing when the fence moves on.
        let mut quiet = HeldLog::default();
        assert_eq!(quiet.step(Some(&holder(7, Some(0.1))), 1, t0), Say::Nothing);
        assert_eq!(quiet.step(None, 0, t0 + Duration::from_secs(1)), Say::Nothing);
    }
}
