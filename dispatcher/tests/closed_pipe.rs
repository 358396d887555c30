//! A dispatcher whose stdout and stderr are a pipe whose reader has gone (`| head -1`, a log
//! shipper that stopped) goes on delivering, and SIGTERM or SIGINT still stops it at once: a log
//! line that cannot be written is dropped, never a panic in the task that logged it (the signal
//! handler's included, which left the process deaf to everything but SIGKILL; issue 44).
mod common;

use std::{
    io::{BufRead, BufReader, PipeReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use common::*;
use highwater::{NewEvent, append};
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use serde_json::json;

/// `highwater dispatch` with stdout and stderr both on one pipe; the read end is returned.
fn start(url: &str, instance: &str) -> (Child, PipeReader) {
    let (reader, writer) = std::io::pipe().unwrap();
    let child = Command::new(bin())
        .args(["dispatch", "--instance-id", instance, "--listen", "off", "--poll-interval", "20ms"])
        .env("DATABASE_URL", url)
        .env("HIGHWATER_LOG", "info,sqlx=warn")
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .expect("spawn dispatcher");
    (child, reader)
}

/// Reads the pipe like `head` until a line containing `what`, then closes it (the read end is
/// dropped when the reading thread ends).
fn read_until_then_close(reader: PipeReader, what: &'static str, within: Duration) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            let found = line.contains(what);
            seen.push(line);
            if found {
                break;
            }
        }
        let _ = tx.send(seen);
    });
    let seen = rx.recv_timeout(within).unwrap_or_else(|_| panic!("no log line with {what:?} within {within:?}"));
    assert!(seen.last().is_some_and(|l| l.contains(what)), "the log ended before {what:?}:\n{}", seen.join("\n"));
}

/// Sends `signal` and waits (with a deadline) for the exit status.
fn stop(child: &mut Child, signal: Signal, within: Duration) -> Option<i32> {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

async fn append_ticks(pool: &sqlx::PgPool, n: i64) {
    let mut tx = pool.begin().await.unwrap();
    for i in 0..n {
        append(&mut tx, &NewEvent::new("s", &i.to_string(), "Tick", json!({"i": i}))).await.unwrap();
    }
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_log_pipe_neither_stops_delivery_nor_shutdown() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE applied (event_id bigint NOT NULL)").execute(&db.pool).await.unwrap();
    apply(&db.pool, &consumer("proj", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO applied VALUES ($2)'}}"))
        .await;

    // `| head -1` closing once the dispatcher is up: it keeps delivering, and SIGTERM stops it.
    let (mut d, reader) = start(&db.url, "after-start");
    read_until_then_close(reader, "dispatcher started", Duration::from_secs(60));
    append_ticks(&db.pool, 5).await;
    wait_count(&db.pool, "SELECT count(*) FROM applied", 5, Duration::from_secs(30)).await;
    let code = stop(&mut d, Signal::SIGTERM, Duration::from_secs(15));
    if code.is_none() {
        let _ = d.kill();
    }
    assert_eq!(code, Some(0), "SIGTERM stops a dispatcher whose log pipe is closed, cleanly");

    // A pipe closed before the first line: the dispatcher starts, delivers, and SIGINT stops it.
    let (mut d, reader) = start(&db.url, "closed-from-start");
    drop(reader);
    append_ticks(&db.pool, 5).await;
    wait_count(&db.pool, "SELECT count(*) FROM applied", 10, Duration::from_secs(30)).await;
    assert!(d.try_wait().unwrap().is_none(), "still running after logging into a closed pipe");
    let code = stop(&mut d, Signal::SIGINT, Duration::from_secs(15));
    if code.is_none() {
        let _ = d.kill();
    }
    assert_eq!(code, Some(0), "SIGINT stops a dispatcher whose log pipe is closed, cleanly");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(DISTINCT event_id) FROM applied").await, 10, "each event once");
}
