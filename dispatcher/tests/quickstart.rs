//! The README's first command works: an embedded PostgreSQL, several dispatcher processes, every
//! event delivered to every example consumer, a clean stop.
mod common;

use std::process::Command;

#[test]
fn quickstart_delivers_every_event_and_stops_cleanly() {
    let out = Command::new(common::bin())
        .args(["quickstart", "--instances", "2", "--events", "60", "--write-for", "2s"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "quickstart failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("every event delivered to every consumer: OK"), "{stdout}");
    assert!(stdout.contains("appended 60 events"), "{stdout}");
}
