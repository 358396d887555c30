//! A connection that cannot work is reported at once, in one line with the fix, by every kind of
//! command: a wrong password, a database that does not exist, a role that does not exist, no
//! server at the address. Only the last is waited for by the dispatcher (a server starting).
mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use highwater_testkit::TestCluster;

/// (exit code, the first line of stderr's error, how long it took).
fn run(url: &str, args: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let out = Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), text, started.elapsed())
}

const DISPATCH: &[&str] = &["dispatch", "--instance-id", "x", "--listen", "off", "--connect-timeout", "20s"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_that_cannot_work_is_refused_at_once_with_the_fix() {
    let db = setup(&[]).await;
    let good = db.pg.create_password_login("alice", "right").await.unwrap();
    let port = db.pg.port();
    let cases = [
        (good.replace(":right@", ":wrong@"), "refused the password", "correct the password in DATABASE_URL"),
        (db.pg.url_for("nosuchdb"), "database \"nosuchdb\" does not exist", "CREATE DATABASE"),
        (
            format!("postgres://nosuchrole@127.0.0.1:{port}/postgres"),
            "role \"nosuchrole\" does not exist",
            "highwater roles --print",
        ),
    ];
    for (url, problem, fix) in &cases {
        for args in [&["migrate"][..], &["consumer", "list"], DISPATCH] {
            let (code, text, took) = run(url, args);
            assert_eq!(code, Some(1), "{args:?} against {url}: {text}");
            assert!(text.contains(problem) && text.contains(fix), "{args:?}: names {problem:?} and {fix:?}: {text}");
            // The dispatcher waits for a server that does not answer, never for these.
            assert!(took < Duration::from_secs(5), "{args:?} refused at once, took {took:?}: {text}");
        }
    }
    let schemas: i64 = scalar_i64(&db.pool, "SELECT count(*) FROM pg_database WHERE datname = 'nosuchdb'").await;
    assert_eq!(schemas, 0, "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_at_the_address_is_named_and_the_dispatcher_waits_for_one() {
    let port = highwater::embedded::free_port().unwrap();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let (code, text, took) = run(&url, &["consumer", "list"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("Connection refused") && text.contains("PostgreSQL is running"), "{text}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (code, text, took) =
        run(&url, &["dispatch", "--instance-id", "x", "--listen", "off", "--connect-timeout", "2s"]);
    assert_eq!(code, Some(1), "{text}");
    // Backoff with jitter, the last sleep cut to the deadline: it waits the whole timeout.
    assert!(took >= Duration::from_millis(1900), "the dispatcher waited its whole --connect-timeout: {took:?}");
    assert!(text.contains("database not reachable yet"), "and said so while it waited: {text}");
}
