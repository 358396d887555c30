//! What the receiver acknowledged beyond a failed event (issue 49): with `spec.concurrency`, the
//! other keys' events after the failing one are delivered in the same attempt, but the cursor
//! can only move to just before the failure (the watermark). They are remembered here, so that
//! the retry sends the failing keys' events and the new ones, not those again; and while the
//! failure waits for its retry, the side pass (dispatch/side.rs) delivers the other keys' new
//! events of the window and adds them here. A failing key holds back its own events only, and
//! without a crash nothing is delivered twice.
//!
//! The memory is the dispatcher's, in its worker for the shard. It is used only while the shard
//! is exactly as the recorded failure left it — at that cursor, failing at that event with that
//! attempt count — so that any other change (another dispatcher's pass, a rewind, a skip, a
//! rebuild, a restart) forgets it and the events are sent again (same idempotency keys): at most
//! the window after the failure, as after a crash.
use std::{collections::HashSet, sync::Mutex};

use highwater_crds::OrderingKey;
use highwater_store::{Event, Position, shards::Shard};

/// The failure a memory belongs to: `(cursor, failing event, attempts)` as recorded.
pub type Failed = (Position, i64, i32);

#[derive(Default)]
pub struct AckedAhead {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Acknowledged in the attempt under way.
    attempt: HashSet<i64>,
    /// Failed in the attempt under way.
    attempt_failed: HashSet<i64>,
    recorded: Option<Recorded>,
}

struct Recorded {
    failed: Failed,
    /// Acknowledged after the cursor.
    acked: HashSet<i64>,
    /// The failed events: their keys wait for the retry.
    held: HashSet<i64>,
    /// Whether the side pass may go on (not after the receiver asked to pause or to stop).
    side: bool,
}

impl Recorded {
    fn matches(&self, shard: &Shard) -> bool {
        let (cursor, event, attempts) = self.failed;
        shard.cursor == cursor && shard.failing_event_id == Some(event) && shard.attempts == attempts
    }
}

impl AckedAhead {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The events of `shard`'s batch known delivered: empty unless `shard` is exactly as its last
    /// recorded failure left it. Starts a new attempt with them.
    pub fn for_attempt(&self, shard: &Shard) -> HashSet<i64> {
        let mut inner = self.lock();
        let known = match inner.recorded.take() {
            Some(r) if r.matches(shard) => r.acked,
            _ => HashSet::new(),
        };
        inner.attempt = known.clone();
        inner.attempt_failed.clear();
        known
    }

    /// The attempt under way had `event` acknowledged.
    pub fn acknowledged(&self, event: &Event) {
        self.lock().attempt.insert(event.id);
    }

    /// The attempt under way had `event` fail.
    pub fn failed(&self, event: &Event) {
        self.lock().attempt_failed.insert(event.id);
    }

    /// The attempt's failure was recorded as `failed` with a retry: what it acknowledged after
    /// the cursor is kept for that retry, and the keys of what failed wait for it. `side`: the
    /// other keys may go on meanwhile (not while the receiver asked the consumer to pause).
    pub fn retry(&self, failed: Failed, events: &[Event], side: bool) {
        let mut inner = self.lock();
        let (attempt, mut held) = (std::mem::take(&mut inner.attempt), std::mem::take(&mut inner.attempt_failed));
        let acked: HashSet<i64> =
            events.iter().filter(|e| e.position() > failed.0 && attempt.contains(&e.id)).map(|e| e.id).collect();
        held.insert(failed.1);
        inner.recorded = Some(Recorded { failed, acked, held, side });
    }

    /// Nothing to keep (delivered, parked, dead, disabled, or changed under the pass).
    pub fn forget(&self) {
        let mut inner = self.lock();
        inner.attempt.clear();
        inner.attempt_failed.clear();
        inner.recorded = None;
    }

    /// Whether a failure waits for its retry and the side pass may deliver meanwhile.
    pub fn goes_on(&self) -> bool {
        self.lock().recorded.as_ref().is_some_and(|r| r.side)
    }

    /// For the side pass over `events` (the batch after `shard`'s cursor): the events it must not
    /// send — acknowledged already, or of a key that waits for the retry; `None` unless `shard` is
    /// as the recorded failure left it. Starts the side attempt.
    pub fn side_plan(
        &self,
        shard: &Shard,
        events: &[Event],
        key_of: impl Fn(&Event) -> Option<String>,
    ) -> Option<HashSet<i64>> {
        let mut inner = self.lock();
        let r = inner.recorded.as_ref().filter(|r| r.side && r.matches(shard))?;
        // `None` as the key (orderingKey: none): each event is its own key.
        let held_keys: HashSet<String> = events.iter().filter(|e| r.held.contains(&e.id)).filter_map(&key_of).collect();
        let skip = events
            .iter()
            .filter(|e| {
                r.acked.contains(&e.id) || r.held.contains(&e.id) || key_of(e).is_some_and(|k| held_keys.contains(&k))
            })
            .map(|e| e.id)
            .collect();
        inner.attempt.clear();
        inner.attempt_failed.clear();
        Some(skip)
    }

    /// The side attempt is over: what it acknowledged is known, the keys of what failed wait for
    /// the retry; `stop`: no more side passes before it (the receiver asked to pause or stop, or
    /// the window is full).
    pub fn side_done(&self, stop: bool) {
        let mut inner = self.lock();
        let (attempt, failed) = (std::mem::take(&mut inner.attempt), std::mem::take(&mut inner.attempt_failed));
        if let Some(r) = inner.recorded.as_mut() {
            r.acked.extend(attempt);
            r.held.extend(failed);
            r.side &= !stop;
        }
    }
}

/// The key the side pass holds back by: the ordering key's text; `None` for `orderingKey: none`.
pub fn held_key(key: &OrderingKey) -> impl Fn(&Event) -> Option<String> + '_ {
    move |e| (*key != OrderingKey::None).then(|| super::concurrent::key_text(e, key))
}

#[cfg(test)]
mod tests {
    use highwater_store::shards::Status;

    use super::*;
    use crate::fixtures::event;

    fn shard(cursor: Position, failing: Option<i64>, attempts: i32) -> Shard {
        Shard {
            consumer: "c".into(),
            instance_id: "i".into(),
            cursor,
            status: Status::Processing,
            attempts,
            last_error: None,
            failing_event_id: failing,
            next_attempt_at: None,
            retry_in_ms: Some(1000),
            skip: vec![],
            partition: None,
            barrier: None,
        }
    }

    /// Events 1 (stream a, failing), 2 (b, acknowledged), 3 (a), 4 (c, acknowledged).
    fn after_a_failure() -> (AckedAhead, Vec<Event>) {
        let events = vec![event(1, "a"), event(2, "b"), event(3, "a"), event(4, "c")];
        let acked = AckedAhead::default();
        acked.for_attempt(&shard(Position::ZERO, None, 0));
        acked.acknowledged(&events[1]);
        acked.acknowledged(&events[3]);
        acked.failed(&events[0]);
        acked.retry((Position::ZERO, 1, 1), &events, true);
        (acked, events)
    }

    #[test]
    fn the_retry_of_that_very_failure_skips_what_was_acknowledged() {
        let (acked, _) = after_a_failure();
        assert_eq!(acked.for_attempt(&shard(Position::ZERO, Some(1), 1)), HashSet::from([2, 4]));
    }

    #[test]
    fn any_other_shard_state_forgets_it() {
        for other in [
            shard(Position { tx: 1, id: 1 }, Some(3), 1), // the cursor moved (another dispatcher, a skip)
            shard(Position::ZERO, Some(1), 2),            // another attempt recorded meanwhile
            shard(Position::ZERO, None, 0),               // a rewind or a restart
        ] {
            let (acked, _) = after_a_failure();
            assert!(acked.for_attempt(&other).is_empty(), "{other:?}");
            // Taken: not used twice.
            assert!(acked.for_attempt(&shard(Position::ZERO, Some(1), 1)).is_empty());
        }
    }

    #[test]
    fn the_side_pass_holds_the_failing_key_and_what_fails_in_it() {
        let (acked, mut events) = after_a_failure();
        events.extend([event(5, "b"), event(6, "d"), event(7, "a")]);
        let key = OrderingKey::Stream;
        let waiting = shard(Position::ZERO, Some(1), 1);
        let skip = acked.side_plan(&waiting, &events, held_key(&key)).unwrap();
        // Stream a waits (1, 3, 7); 2 and 4 were acknowledged; 5 and 6 go.
        assert_eq!(skip, HashSet::from([1, 2, 3, 4, 7]));
        acked.acknowledged(&events[4]);
        acked.failed(&events[5]);
        acked.side_done(false);
        let skip = acked.side_plan(&waiting, &events, held_key(&key)).unwrap();
        assert_eq!(skip, HashSet::from([1, 2, 3, 4, 5, 6, 7]), "d failed: it waits for the retry too");
        acked.side_done(true);
        assert!(!acked.goes_on(), "stopped until the retry");
        assert!(acked.side_plan(&waiting, &events, held_key(&key)).is_none());
        assert_eq!(acked.for_attempt(&waiting), HashSet::from([2, 4, 5]), "the retry skips what the side pass sent");
    }
}
