//! The floors of `dispatch`'s intervals. `dispatch --poll-interval 0s` was accepted and read the
//! head in a hot loop (3,231 head queries in 5 s while the fence was held; issue 44); a zero
//! `--metrics-interval` ended the gauges' task at its first tick (tokio's interval panics on a
//! zero period), silently, and a zero `--membership-interval` wrote heartbeats in a loop that
//! declared every member gone at once.
use std::time::Duration;

use crate::{Error, Result};

/// `--poll-interval` and `--idle-poll-interval`: fast enough for any use, a hundred reads a
/// second at most.
pub const POLL_FLOOR: Duration = Duration::from_millis(10);
/// `--busy-poll-interval`: the awake poller reads the head this often on purpose (writers skip
/// their NOTIFY meanwhile), but never in a loop without a pause.
pub const BUSY_POLL_FLOOR: Duration = Duration::from_millis(1);
/// `--metrics-interval` and `--membership-interval`: background refreshes, ten a second at most.
pub const BACKGROUND_FLOOR: Duration = Duration::from_millis(100);

const HOT_HEAD: &str = "the dispatcher would query the database for the head in a hot loop";

/// Refuses `value` for `flag` below `floor`, naming the flag, the floor, `why` and the default.
pub fn at_least(flag: &str, value: Duration, floor: Duration, default: &str, why: &str) -> Result<()> {
    if value >= floor {
        return Ok(());
    }
    let (value, floor) = (humantime::format_duration(value), humantime::format_duration(floor));
    Err(Error::config(format!("{flag} {value} is below its floor of {floor}: {why}"))
        .with_fix(format!("pass {flag} {floor} or more, or leave it out (the default is {default})")))
}

/// `dispatch`'s intervals, each at or above its floor.
pub struct Intervals {
    pub poll: Duration,
    pub idle: Duration,
    pub busy: Duration,
    pub metrics: Duration,
    pub membership: Duration,
}

/// Every interval of `dispatch` at or above its floor.
pub fn check(i: &Intervals) -> Result<()> {
    at_least("--poll-interval", i.poll, POLL_FLOOR, "100ms", HOT_HEAD)?;
    at_least("--idle-poll-interval", i.idle, POLL_FLOOR, "1s", HOT_HEAD)?;
    at_least("--busy-poll-interval", i.busy, BUSY_POLL_FLOOR, "5ms", HOT_HEAD)?;
    let gauges = "lag, status and the fence's holder would stop being refreshed";
    at_least("--metrics-interval", i.metrics, BACKGROUND_FLOOR, "5s", gauges)?;
    let members = "the dispatcher would write its heartbeat in a loop and see every member as gone";
    at_least("--membership-interval", i.membership, BACKGROUND_FLOOR, "1s", members)
}
