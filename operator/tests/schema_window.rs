//! The operator against a schema outside its compatibility window (docs/operations.md,
//! "Upgrading"): a schema migrated past it (its window no longer accepts this binary) and a schema
//! behind it (this release's migrate has not run). Either way it exits 1 at start with the problem
//! and the fix, never becomes ready, and reconciles nothing.
mod common;

use std::time::{Duration, Instant};

use common::*;
use highwater::migrate::window;

const CONSUMER: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: refused, namespace: default}
spec:
  delivery: Shared
  sink: {log: {target: stderr}}
"#;

/// Waits for the operator to exit; its exit code.
fn exit_code(op: &mut Operator, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(s)) = op.child.try_wait() {
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

async fn consumers(w: &World) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM highwater.consumers").fetch_one(&w.pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_refuses_a_schema_outside_its_window() {
    let w = world(&[]).await;
    let applied = apply(&w, CONSUMER).await;
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));

    // Migrated by a newer release whose window starts after this binary.
    sqlx::query("UPDATE highwater.schema_version SET version = $1, oldest_binary = $1, release = '9.9.9'")
        .bind(window::SCHEMA_VERSION + 1)
        .execute(&w.pool)
        .await
        .unwrap();
    let mut op = Operator::start(&w, "too-old", false);
    let code = exit_code(&mut op, Duration::from_secs(30));
    let log = op.log();
    assert_eq!(code, Some(1), "exits 1 at once:\n{log}");
    assert!(log.contains("no longer supports this binary"), "names the problem:\n{log}");
    assert!(log.contains("run the image of release 9.9.9 or newer"), "names the fix:\n{log}");
    assert_eq!(consumers(&w).await, 0, "reconciled nothing");

    // Behind this binary: this release's migrate has not run yet.
    sqlx::query("UPDATE highwater.schema_version SET version = $1, oldest_binary = 1, release = '0.0.1'")
        .bind(window::SCHEMA_VERSION - 1)
        .execute(&w.pool)
        .await
        .unwrap();
    let mut op = Operator::start(&w, "too-new", false);
    let code = exit_code(&mut op, Duration::from_secs(30));
    let log = op.log();
    assert_eq!(code, Some(1), "exits 1:\n{log}");
    assert!(log.contains("highwater migrate"), "names migrate as the fix:\n{log}");
    assert_eq!(consumers(&w).await, 0, "reconciled nothing");

    // Inside the window again: it starts and reconciles the resource it refused to touch.
    sqlx::query("UPDATE highwater.schema_version SET version = $1, oldest_binary = $2, release = $3")
        .bind(window::SCHEMA_VERSION)
        .bind(window::OLDEST_BINARY)
        .bind(window::RELEASE)
        .execute(&w.pool)
        .await
        .unwrap();
    let op = Operator::start(&w, "inside", false);
    let pool = w.pool.clone();
    eventually("the consumer's row", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM highwater.consumers WHERE name = 'refused'")
                .fetch_one(&pool)
                .await
                .unwrap()
                == 1
        }
    })
    .await;
    assert_eq!(op.stop(), Some(0));
}
