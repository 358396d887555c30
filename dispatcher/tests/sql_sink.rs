//! The SQL sink's context: `SET LOCAL ROLE`, `highwater.tenant_id` for row-level security, and the
//! correlation/causation links of events a handler appends.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;

const SETUP: &str = "
CREATE TABLE notes (tenant text NOT NULL, event_id bigint NOT NULL, body text);
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
ALTER TABLE notes FORCE ROW LEVEL SECURITY;
CREATE POLICY own_tenant ON notes
    USING (tenant = current_setting('highwater.tenant_id', true))
    WITH CHECK (tenant = current_setting('highwater.tenant_id', true));
CREATE ROLE projector NOLOGIN;
GRANT USAGE ON SCHEMA highwater TO projector;
GRANT INSERT, SELECT ON notes TO projector;
GRANT EXECUTE ON FUNCTION highwater.append(text, text, text, jsonb, jsonb, text, bigint) TO projector;
CREATE TABLE secrets (x int);";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_and_role_confine_the_statement() {
    let db = setup(&["NoteAdded", "NoteIndexed"]).await;
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    // The statement writes the note into the payload's tenant, which must be the event's own
    // tenant, and appends a follow-up event.
    let yaml = [
        consumer(
            "notes",
            "delivery: Shared\nmaxAttempts: 1\nerrorMode: skip\nsink:\n  sql:\n    role: projector\n    statement: \"WITH n AS (INSERT INTO notes VALUES ($1->>'tenant', $2, $1->>'body') RETURNING event_id) SELECT highwater.append('note', $4, 'NoteIndexed', '{}') FROM n\"",
        ),
        consumer("nosy", "delivery: Shared\nmaxAttempts: 1\nerrorMode: skip\neventTypes: [NoteAdded]\nsink: {sql: {role: projector, statement: 'INSERT INTO secrets VALUES (1)'}}"),
    ]
    .concat();
    apply(&db.pool, &yaml).await;

    let mut tx = db.pool.begin().await.unwrap();
    let mut own = NewEvent::new("note", "a", "NoteAdded", json!({"tenant": "acme", "body": "hi"}));
    own.tenant_id = Some("acme".into());
    own.metadata = Some(json!({"correlation_id": "req-1"}));
    let own_id = append(&mut tx, &own).await.unwrap();
    let mut other = NewEvent::new("note", "b", "NoteAdded", json!({"tenant": "globex", "body": "sneaky"}));
    other.tenant_id = Some("acme".into());
    let other_id = append(&mut tx, &other).await.unwrap();
    tx.commit().await.unwrap();

    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "s0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM highwater.dead_letters", 4, Duration::from_secs(30)).await;

    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT tenant, event_id FROM notes").fetch_all(&db.pool).await.unwrap();
    assert_eq!(rows, vec![("acme".to_owned(), own_id)], "only the event's own tenant's row was written");
    let parked: Vec<(String, i64, String)> =
        sqlx::query_as("SELECT consumer, event_id, error FROM highwater.dead_letters ORDER BY consumer, event_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!((parked[0].0.as_str(), parked[0].1), ("nosy", own_id));
    assert!(parked[0].2.contains("permission denied for table secrets"), "{parked:?}");
    assert_eq!((parked[1].0.as_str(), parked[1].1), ("nosy", other_id));
    assert_eq!((parked[2].0.as_str(), parked[2].1), ("notes", other_id));
    assert!(parked[2].2.contains("row-level security"), "{parked:?}");
    // The follow-up event has no tenant in its payload: the policy refuses its note too.
    assert_eq!(parked.len(), 4, "{parked:?}");
    assert_eq!(parked[3].0, "notes");

    // The follow-up event carries the tenant, correlation and causation of its cause.
    let (tenant, meta): (Option<String>, serde_json::Value) =
        sqlx::query_as("SELECT tenant_id, metadata FROM highwater.events WHERE event_type = 'NoteIndexed'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(tenant.as_deref(), Some("acme"));
    assert_eq!(meta["correlation_id"], "req-1");
    assert_eq!(meta["causation_id"], own_id.to_string());
}

#[tokio::test]
async fn cli_append_stores_and_refuses() {
    let db = setup(&["Tick"]).await;
    let append = |payload: &str, version: Option<&str>| {
        let mut args = vec!["events", "append", "--stream-type", "s", "--stream-id", "1", "--type", "Tick"];
        args.extend(["--payload", payload]);
        if let Some(v) = version {
            args.extend(["--expected-version", v]);
        }
        std::process::Command::new(bin()).args(args).env("DATABASE_URL", &db.url).output().unwrap()
    };
    let out = append("{\"n\": 1}", Some("0"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let out = append("{}", Some("0"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected 0"));
    let out = append("{not json", None);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--payload is not valid JSON"));
    let stored: Vec<i64> = sqlx::query_scalar("SELECT id FROM highwater.events").fetch_all(&db.pool).await.unwrap();
    assert_eq!(stored, vec![id]);
}
