//! `dispatch` refuses head-polling intervals below their floor (`--poll-interval 0s` was accepted
//! and read the head in a hot loop; issue 44), naming the flag, the floor and the fix, before it
//! starts anything; at the floor it runs.
mod common;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::*;

/// Runs `dispatch` with `args` against `url`; its exit code and stderr, or `None` if it was
/// still running after `within` (then it is killed).
fn dispatch(url: &str, args: &[&str], within: Duration) -> Option<(i32, String)> {
    let mut child = Command::new(bin())
        .args(["dispatch", "--instance-id", "floor", "--listen", "off"])
        .args(args)
        .env("DATABASE_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            return Some((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_intervals_below_their_floor_are_refused() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &consumer("proj", "delivery: PerInstance\nsink: {log: {target: stderr}}")).await;

    for (flag, value, floor) in [
        ("--poll-interval", "0s", "10ms"),
        ("--poll-interval", "9ms", "10ms"),
        ("--idle-poll-interval", "0s", "10ms"),
        ("--busy-poll-interval", "0s", "1ms"),
        ("--metrics-interval", "0s", "100ms"),
        ("--membership-interval", "50ms", "100ms"),
    ] {
        let (code, stderr) = dispatch(&db.url, &[flag, value], Duration::from_secs(30))
            .unwrap_or_else(|| panic!("dispatch {flag} {value} was accepted (still running after 30 s)"));
        assert_eq!(code, 1, "{flag} {value}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(flag) && first.contains(value) && first.contains(&format!("floor of {floor}")),
            "one message naming the flag, the value and the floor: {stderr}"
        );
        assert!(stderr.contains(&format!("fix: pass {flag} {floor} or more")), "the fix: {stderr}");
        assert!(!stderr.contains("dispatcher started"), "nothing started: {stderr}");
    }
    let shards = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumer_shards").await;
    assert_eq!(shards, 0, "no refused dispatcher registered its shard");

    // At the floors it runs.
    let mut d = Command::new(bin())
        .args(["dispatch", "--instance-id", "floor", "--listen", "off"])
        .args(["--poll-interval", "10ms", "--idle-poll-interval", "10ms", "--busy-poll-interval", "1ms"])
        .args(["--metrics-interval", "100ms", "--membership-interval", "100ms"])
        .env("DATABASE_URL", &db.url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_registered(&db.pool, "proj", 1).await;
    assert!(d.try_wait().unwrap().is_none(), "a dispatcher at the floors runs");
    let _ = d.kill();
    let _ = d.wait();
}
