//! Which event types the head's recent moves brought: the lazy cursor (issue 38, part 2).
//!
//! Without it, every consumer whose cursor the head passed runs a pass (claim, read, cursor move,
//! release: four statements) on every head move, also when none of the new events is of its
//! types: with 200 consumers of one type each, 200 passes per move where a handful deliver. The
//! head poller reads the types of the events between the previous head and the new one once per
//! move (one statement per dispatcher, proportional to the new events), and a worker whose
//! types none of those events have leaves its cursor where it is, for at most the lazy interval;
//! then one pass moves it to the head. Nothing about delivery changes: the range between such a
//! cursor and the head holds no event of the consumer's types, which is also what the lag
//! (counted over its own types) and `applied_bound` (the first own event beyond the cursor)
//! already say of it, exactly.
//!
//! Why the range is stable: both heads are below their fences, and every transaction below a
//! fence has ended, so no event can appear between them after the read.
use std::{collections::VecDeque, sync::Mutex};

use highwater_store::pg::PgPool;

use highwater_store::{Position, Result, head};

/// At most this many events read per head move; a bigger jump (a bulk load, the first read)
/// forgets the log instead: the workers behind it then run their passes as without it.
const MAX_EVENTS: i64 = 20_000;
/// Moves remembered; older ones are forgotten (their workers run a pass).
const MAX_MOVES: usize = 4096;

#[derive(Default)]
pub struct Touched {
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    /// Where the log starts: a cursor at or after it can be answered. `None`: nothing known.
    start: Option<Position>,
    /// `(to, types)`: the types of the events in `(previous to, to]`, oldest first.
    moves: VecDeque<(Position, Vec<String>)>,
}

impl Touched {
    /// Whether any event of `types` lies after `cursor` up to the newest recorded head. `None`
    /// when the log cannot tell (the cursor is older than what it remembers).
    pub fn touches(&self, cursor: Position, types: &[String]) -> Option<bool> {
        let log = self.log.lock().expect("touched log");
        let start = log.start?;
        if cursor < start {
            return None;
        }
        // Newest first: the moves after the cursor are at the back.
        Some(
            log.moves
                .iter()
                .rev()
                .take_while(|(to, _)| *to > cursor)
                .any(|(_, seen)| seen.iter().any(|t| types.contains(t))),
        )
    }

    /// Records the move of the head from `from` to `to`, reading the types in between.
    pub async fn record(&self, pool: &PgPool, from: Option<Position>, to: Option<Position>) {
        let (Some(from), Some(to)) = (from, to) else { return self.forget(to) };
        if to <= from {
            // The head went back (events deleted by hand, a restore): nothing recorded holds.
            return self.forget(Some(to));
        }
        match read_types(pool, from, to).await {
            Ok(Some(types)) => {
                let mut log = self.log.lock().expect("touched log");
                if log.start.is_none_or(|s| s > from) || log.moves.back().is_some_and(|(last, _)| *last != from) {
                    // Not contiguous with what the log holds: start it here.
                    log.moves.clear();
                    log.start = Some(from);
                }
                log.moves.push_back((to, types));
                while log.moves.len() > MAX_MOVES {
                    if let Some((oldest, _)) = log.moves.pop_front() {
                        log.start = Some(oldest);
                    }
                }
            }
            Ok(None) => self.forget(Some(to)),
            Err(e) => {
                tracing::debug!(error = %e, "reading the types of the new events failed; cursors move eagerly");
                self.forget(Some(to));
            }
        }
    }

    /// Starts the log again at `at` (or empty): cursors before it get passes.
    fn forget(&self, at: Option<Position>) {
        let mut log = self.log.lock().expect("touched log");
        log.moves.clear();
        log.start = at;
    }
}

/// The distinct types of the events in `(from, to]`; `None` when there are more than
/// [`MAX_EVENTS`] of them.
async fn read_types(pool: &PgPool, from: Position, to: Position) -> Result<Option<Vec<String>>> {
    head::types_between(pool, from, to, MAX_EVENTS).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(tx: u64, id: i64) -> Position {
        Position { tx, id }
    }

    fn log(start: Position, moves: &[(Position, &[&str])]) -> Touched {
        let t = Touched::default();
        {
            let mut l = t.log.lock().unwrap();
            l.start = Some(start);
            l.moves = moves.iter().map(|(to, ts)| (*to, ts.iter().map(|s| s.to_string()).collect())).collect();
        }
        t
    }

    #[test]
    fn answers_only_from_its_start_on() {
        let t = log(p(10, 5), &[(p(12, 7), &["A"]), (p(15, 9), &["B"])]);
        let a = ["A".to_string()];
        let b = ["B".to_string()];
        assert_eq!(t.touches(p(9, 1), &a), None, "before the log's start");
        assert_eq!(t.touches(p(10, 5), &a), Some(true), "A came in (10/5, 12/7]");
        assert_eq!(t.touches(p(12, 7), &a), Some(false), "after 12/7 only B came");
        assert_eq!(t.touches(p(12, 7), &b), Some(true));
        assert_eq!(t.touches(p(13, 8), &b), Some(true), "a cursor inside a move's range counts the move");
        assert_eq!(t.touches(p(15, 9), &b), Some(false), "at the head: nothing after it");
        assert_eq!(Touched::default().touches(p(1, 1), &a), None, "an empty log knows nothing");
    }

    #[test]
    fn compares_positions_as_numbers() {
        // 9 < 10 as numbers, "9" > "10" as text.
        let t = log(p(9, 1), &[(p(10, 2), &["A"])]);
        assert_eq!(t.touches(p(9, 1), &["A".to_string()]), Some(true));
    }
}
