//! The annotations that act on one stream, through a real API server: `highwater.dev/discard`
//! discards the blocking dead letter of an `errorMode: skipStream` stream once per value (the
//! events parked behind it then delivered in order, the discarded one never), and
//! `highwater.dev/replay` replays a stream once per value; each refusal is a Warning Event with
//! nothing changed, each value recorded in the status.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, append, dispatch};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

async fn jsonpath(w: &World, path: &str) -> String {
    w.cp.kubectl_ok(["get", "ec", "blocked", "-n", "shop", "-o", &format!("jsonpath={path}")]).await.unwrap_or_default()
}

async fn has_event(w: &World, reason: &str) -> bool {
    let out =
        w.cp.kubectl_ok(["get", "events", "-n", "shop", "--field-selector", &format!("reason={reason}"), "-o", "name"])
            .await
            .unwrap_or_default();
    !out.trim().is_empty()
}

/// An event of stream s/1; `n` 0 is poison for the sink below.
async fn add(w: &World, n: i64) -> i64 {
    let mut tx = w.pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({"n": n}))).await.unwrap();
    tx.commit().await.unwrap();
    id
}

async fn seen(w: &World) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM seen ORDER BY seq").fetch_all(&w.pool).await.unwrap()
}

fn dispatcher(w: &World) -> (CancellationToken, JoinHandle<highwater::Result<()>>) {
    let stop = CancellationToken::new();
    let mut cfg = dispatch::DispatchConfig::new("default", "test-dispatcher");
    cfg.poll_interval = Duration::from_millis(20);
    cfg.refresh_interval = Duration::from_secs(1);
    (stop.clone(), tokio::spawn(dispatch::run(w.pool.clone(), cfg, stop)))
}

async fn annotate(w: &World, key: &str, value: &str) {
    w.cp.kubectl_ok([
        "annotate",
        "ec",
        "blocked",
        "-n",
        "shop",
        "--overwrite",
        &format!("highwater.dev/{key}={value}"),
    ])
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discard_and_replay_annotations_act_once_per_value() {
    let w = world(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (seq bigserial, id bigint, x int)").execute(&w.pool).await.unwrap();
    let _op = Operator::start(&w, "op-1", false);
    let ec = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: blocked, namespace: shop}
spec:
  delivery: Shared
  errorMode: skipStream
  maxAttempts: 1
  backoff: {initial: 50ms, max: 100ms}
  sink: {sql: {statement: "INSERT INTO seen (id, x) SELECT $2, 1 / ($1->>'n')::int"}}
"#;
    assert!(apply(&w, ec).await.status.success());
    eventually("Ready", Duration::from_secs(60), || async { jsonpath(&w, "{.status.state}").await == "Ready" }).await;
    let (stop, d) = dispatcher(&w);
    let a1 = add(&w, 1).await;
    let a2 = add(&w, 0).await;
    let a3 = add(&w, 1).await;
    let a4 = add(&w, 1).await;
    eventually("a2 dead, a3 and a4 parked behind it", Duration::from_secs(60), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM highwater.dead_letters").fetch_one(&w.pool).await.unwrap()
            == 3
    })
    .await;
    assert_eq!(seen(&w).await, vec![a1]);

    // Refused: not an event id; a parked event (its blocker first). Nothing changes.
    annotate(&w, "discard", "everything").await;
    eventually("a DiscardRefused event", Duration::from_secs(30), || has_event(&w, "DiscardRefused")).await;
    annotate(&w, "discard", &a3.to_string()).await;
    eventually("handledDiscard recorded", Duration::from_secs(30), || async {
        jsonpath(&w, "{.status.handledDiscard}").await == a3.to_string()
    })
    .await;
    assert!(!has_event(&w, "Discarded").await, "a parked event is refused");
    let discarded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM highwater.dead_letters WHERE discarded_at IS NOT NULL")
            .fetch_one(&w.pool)
            .await
            .unwrap();
    assert_eq!(discarded, 0);

    // The blocker discarded: a3 and a4 follow, in order, once; a2 never.
    annotate(&w, "discard", &a2.to_string()).await;
    eventually("a Discarded event", Duration::from_secs(30), || has_event(&w, "Discarded")).await;
    eventually("a3 and a4 delivered", Duration::from_secs(30), || async { seen(&w).await.len() == 3 }).await;
    assert_eq!(seen(&w).await, vec![a1, a3, a4]);
    let (by, reason): (Option<String>, Option<String>) =
        sqlx::query_as("SELECT discarded_by, discard_reason FROM highwater.dead_letters WHERE event_id = $1")
            .bind(a2)
            .fetch_one(&w.pool)
            .await
            .unwrap();
    assert_eq!(by.as_deref(), Some("kubernetes:kubectl-annotate"));
    assert_eq!(reason, Some(format!("annotation highwater.dev/discard={a2} on shop/blocked")));
    assert_eq!(jsonpath(&w, "{.status.handledDiscard}").await, a2.to_string());

    // Replay: an unknown stream is refused; s/1 from a3 on delivers a3 and a4 again (a2, a
    // discarded dead letter, is left out), once per value.
    annotate(&w, "replay", "s/404").await;
    eventually("a ReplayRefused event", Duration::from_secs(30), || has_event(&w, "ReplayRefused")).await;
    assert!(!has_event(&w, "Replayed").await);
    annotate(&w, "replay", &format!("s/1@{a3}#1")).await;
    eventually("a Replayed event", Duration::from_secs(30), || has_event(&w, "Replayed")).await;
    eventually("a3 and a4 replayed", Duration::from_secs(30), || async { seen(&w).await.len() == 5 }).await;
    assert_eq!(seen(&w).await, vec![a1, a3, a4, a3, a4]);
    let by: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT requested_by FROM highwater.replays").fetch_all(&w.pool).await.unwrap();
    assert_eq!(by, vec!["kubernetes:kubectl-annotate".to_owned()]);
    assert_eq!(jsonpath(&w, "{.status.handledReplay}").await, format!("s/1@{a3}#1"));
    // Once per value: later reconciles request nothing more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(seen(&w).await.len(), 5);
    stop.cancel();
    d.await.unwrap().unwrap();
}
