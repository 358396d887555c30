//! Logs written to a file or a pipe carry no ANSI colour codes, and `--log-format json` (or
//! `HIGHWATER_LOG_FORMAT=json`) writes one JSON object per line.
mod common;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use common::*;
use highwater::{NewEvent, append};
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use serde_json::json;

/// A dispatcher whose stderr is the file `stderr` (stdout goes nowhere), with extra arguments
/// and environment.
fn dispatcher(url: &str, stderr: &Path, args: &[&str], env: &[(&str, &str)]) -> Child {
    let port = highwater::embedded::free_port().unwrap();
    Command::new(bin())
        .args(["dispatch", "--instance-id", "logs", "--poll-interval", "20ms"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .env("DATABASE_URL", url)
        .env("HIGHWATER_LOG", "info,sqlx=warn")
        .env_remove("HIGHWATER_LOG_FORMAT")
        .env_remove("NO_COLOR")
        // A terminal-looking environment must not bring colours back into a file.
        .env("TERM", "xterm-256color")
        .env("COLORTERM", "truecolor")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("spawn dispatcher")
}

/// Runs a dispatcher until its log shows a start and a failed delivery (a warning with fields),
/// stops it with SIGTERM and returns what it wrote on stderr.
async fn logs_of(db: &TestDb, dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Vec<u8> {
    let file = dir.join(name);
    let mut child = dispatcher(&db.url, &file, args, env);
    let f = file.clone();
    eventually("a start and a failed delivery in the log", Duration::from_secs(60), || {
        let f = f.clone();
        async move {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            text.contains("dispatcher started") && text.contains("delivery failed")
        }
    })
    .await;
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    std::fs::read(&file).unwrap()
}

fn has_escape(bytes: &[u8]) -> bool {
    bytes.windows(2).any(|w| w == b"\x1b[")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_file_are_plain_and_json_lines_parse() {
    let db = setup(&["Tick"]).await;
    // A consumer that always fails, so the log holds warnings with structured fields: its table
    // is dropped once apply has checked the statement against it.
    sqlx::raw_sql("CREATE TABLE nowhere (id bigint)").execute(&db.pool).await.unwrap();
    apply(
        &db.pool,
        &consumer(
            "broken",
            "delivery: Shared\nmaxAttempts: 1000\nbackoff: {initial: 50ms, max: 100ms}\nsink: {sql: {statement: 'INSERT INTO nowhere VALUES ($2)'}}",
        ),
    )
    .await;
    sqlx::raw_sql("DROP TABLE nowhere").execute(&db.pool).await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    let dir = tempfile::tempdir().unwrap();

    // The default (text) on a file: no colour.
    let text = logs_of(&db, dir.path(), "text.log", &[], &[]).await;
    let shown = String::from_utf8_lossy(&text);
    assert!(!has_escape(&text), "ANSI escape codes in a log file:\n{shown}");
    assert!(shown.contains(" INFO ") && shown.contains(" WARN "), "{shown}");
    assert!(shown.contains("consumer=broken"), "{shown}");

    // JSON from the flag and from the environment.
    for (name, args, env) in [
        ("flag.log", &["--log-format", "json"][..], &[][..]),
        ("env.log", &[][..], &[("HIGHWATER_LOG_FORMAT", "json")][..]),
    ] {
        let bytes = logs_of(&db, dir.path(), name, args, env).await;
        let shown = String::from_utf8_lossy(&bytes);
        assert!(!has_escape(&bytes), "ANSI escape codes in JSON logs:\n{shown}");
        let mut warned = false;
        let mut lines = 0;
        for line in shown.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: not a JSON line ({e}): {line:?}"));
            assert!(v["timestamp"].is_string() && v["level"].is_string(), "{line}");
            assert!(v["fields"]["message"].is_string(), "{line}");
            if v["fields"]["message"] == "delivery failed" {
                assert_eq!(v["level"], "WARN", "{line}");
                assert_eq!(v["fields"]["consumer"], "broken", "{line}");
                warned = true;
            }
            lines += 1;
        }
        assert!(lines >= 2 && warned, "{name}:\n{shown}");
    }
}
