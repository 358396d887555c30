//! `highwater doctor` against real setups: a healthy one (as a superuser: warned), a role without
//! privileges, an unmigrated database, a long transaction holding the fence, a transaction-mode
//! PgBouncer, a standby, no server. Each problem is a finding with its fix; the exit code is the worst (0, 1, 2).
mod common;

use std::{process::Command, time::Duration};

use common::*;
use highwater_testkit::TestCluster;
use serde_json::Value;

/// (exit code, the JSON document).
fn doctor(url: &str, extra: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(bin()).args(["doctor", "-o", "json"]).args(extra).env("DATABASE_URL", url).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let doc = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!("doctor -o json printed no JSON ({e}): {text}{}", String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code(), doc)
}

/// The findings of `check` at `level`.
fn findings<'a>(doc: &'a Value, check: &str, level: &str) -> Vec<&'a Value> {
    doc["findings"].as_array().unwrap().iter().filter(|f| f["check"] == check && f["level"] == level).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_each_problem_with_its_fix() {
    let db = setup(&[]).await;

    // Healthy, but the test role is a superuser: one warning, exit 1.
    let (code, doc) = doctor(&db.url, &[]);
    let warnings: Vec<&Value> = doc["findings"].as_array().unwrap().iter().filter(|f| f["level"] != "ok").collect();
    assert_eq!(code, Some(1), "{doc:#}");
    assert_eq!(warnings.len(), 1, "only the superuser warning: {doc:#}");
    assert!(warnings[0]["message"].as_str().unwrap().contains("is a superuser"), "{doc:#}");
    assert_eq!(doc["status"], "warnings");
    for check in ["connection", "server", "pooler", "schema", "listen", "wal_level", "fence"] {
        assert_eq!(findings(&doc, check, "ok").len(), 1, "{check} is ok: {doc:#}");
    }

    // A login role with no grants: the privileges finding names what is missing, exit 2.
    sqlx::raw_sql("CREATE ROLE bare LOGIN").execute(&db.pool).await.unwrap();
    let bare = format!("postgres://bare@127.0.0.1:{}/postgres", db.pg.port());
    let (code, doc) = doctor(&bare, &[]);
    assert_eq!(code, Some(2), "{doc:#}");
    let p = findings(&doc, "privileges", "error");
    assert_eq!(p.len(), 1, "{doc:#}");
    assert!(p[0]["message"].as_str().unwrap().contains("USAGE on schema highwater"), "{doc:#}");
    assert!(p[0]["fix"].as_str().unwrap().contains("highwater roles --print"), "{doc:#}");
    let (code, doc) = doctor(&bare, &["--as", "application"]);
    assert_eq!(code, Some(2));
    assert!(
        findings(&doc, "privileges", "error")[0]["message"].as_str().unwrap().contains("EXECUTE on highwater.append")
    );

    // An unmigrated database: the schema finding says migrate.
    let empty = db.pg.create_database("empty").await.unwrap();
    let (code, doc) = doctor(&empty, &[]);
    assert_eq!(code, Some(2));
    let s = findings(&doc, "schema", "error");
    assert!(s[0]["fix"].as_str().unwrap().contains("highwater migrate"), "{doc:#}");

    // A transaction holding the fence back: named, with the statement and the fix.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id(), 'the long one'").execute(&mut *tx).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (code, doc) = doctor(&db.url, &["--long-transaction", "1s"]);
    assert_eq!(code, Some(1), "{doc:#}");
    let f = findings(&doc, "fence", "warning");
    assert_eq!(f.len(), 1, "{doc:#}");
    assert!(f[0]["message"].as_str().unwrap().contains("the long one"), "the statement: {doc:#}");
    assert!(f[0]["fix"].as_str().unwrap().contains("pg_terminate_backend"), "{doc:#}");
    tx.rollback().await.unwrap();

    // Behind a transaction-mode pooler: the pooler finding names it and the fix.
    let bouncer = highwater_testkit::pgbouncer::PgBouncer::start(
        db.pg.port(),
        highwater_testkit::pgbouncer::PoolMode::Transaction,
        2,
    )
    .unwrap();
    let (code, doc) = doctor(&bouncer.url_for("postgres"), &[]);
    assert_eq!(code, Some(2), "{doc:#}");
    let p = findings(&doc, "pooler", "error");
    assert_eq!(p.len(), 1, "{doc:#}");
    assert!(p[0]["message"].as_str().unwrap().contains("transaction-mode connection pooler"), "{doc:#}");
    assert!(p[0]["fix"].as_str().unwrap().contains("session-mode pool"), "{doc:#}");
    drop(bouncer);

    // A standby and no server at all.
    let standby = db.pg.start_standby().await.unwrap();
    let (code, doc) = doctor(&standby.url(), &[]);
    assert_eq!(code, Some(2));
    assert!(findings(&doc, "server", "error")[0]["message"].as_str().unwrap().contains("hot standby"), "{doc:#}");
    let port = highwater::embedded::free_port().unwrap();
    let (code, doc) = doctor(&format!("postgres://postgres@127.0.0.1:{port}/postgres"), &[]);
    assert_eq!(code, Some(2));
    assert_eq!(findings(&doc, "connection", "error").len(), 1, "{doc:#}");
    assert_eq!(doc["findings"].as_array().unwrap().len(), 1, "nothing else can be checked: {doc:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_prints_a_list_a_person_reads() {
    let db = setup(&[]).await;
    let out = Command::new(bin()).arg("doctor").env("DATABASE_URL", &db.url).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.lines().any(|l| l.starts_with("ok    server") && l.contains("PostgreSQL")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("WARN  privileges")), "{text}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("fix: give it a role of its own")), "{text}");
}
