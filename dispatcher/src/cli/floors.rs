//! The floors of the head-polling intervals. `dispatch --poll-interval 0s` was accepted and read
//! the head in a hot loop (3,231 head queries in 5 s while the fence was held; issue 44).
use std::time::Duration;

use crate::{Error, Result};

/// `--poll-interval` and `--idle-poll-interval`: fast enough for any use, a hundred reads a
/// second at most.
pub const POLL_FLOOR: Duration = Duration::from_millis(10);
/// `--busy-poll-interval`: the awake poller reads the head this often on purpose (writers skip
/// their NOTIFY meanwhile), but never in a loop without a pause.
pub const BUSY_POLL_FLOOR: Duration = Duration::from_millis(1);

/// Refuses `value` for `flag` below `floor`, naming the flag, the floor and the default.
pub fn at_least(flag: &str, value: Duration, floor: Duration, default: &str) -> Result<()> {
    if value >= floor {
        return Ok(());
    }
    let (value, floor) = (humantime::format_duration(value), humantime::format_duration(floor));
    Err(Error::config(format!(
        "{flag} {value} is below its floor of {floor}: the dispatcher would query the database for the head in a \
         hot loop"
    ))
    .with_fix(format!("pass {flag} {floor} or more, or leave it out (the default is {default})")))
}

/// Every head-polling interval of `dispatch` at or above its floor.
pub fn check(poll: Duration, idle: Duration, busy: Duration) -> Result<()> {
    at_least("--poll-interval", poll, POLL_FLOOR, "100ms")?;
    at_least("--idle-poll-interval", idle, POLL_FLOOR, "1s")?;
    at_least("--busy-poll-interval", busy, BUSY_POLL_FLOOR, "5ms")
}
