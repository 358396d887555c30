//! `spec.concurrency` (issue 49) against a real HTTP receiver and a real dispatcher: up to N
//! requests of one shard in flight, never two of one stream at once, each stream's events in
//! order, every event delivered; a failing event holds the cursor and is retried in order.
mod common;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Router, body::Bytes, extract::State, http::StatusCode, routing::post};
use common::*;
use highwater::{NewEvent, append};
use serde_json::{Value, json};

#[derive(Default)]
struct Inbox {
    /// Accepted events: (stream, event id), in arrival order.
    accepted: Vec<(String, i64)>,
    in_flight: usize,
    max_in_flight: usize,
    busy_streams: HashMap<String, usize>,
    /// A second request of a stream arrived while one of it was in flight.
    overlaps: usize,
    /// Event ids refused once (answered 500 on their first arrival).
    refuse_once: Vec<i64>,
    requests: usize,
}

async fn answer(State(inbox): State<Arc<Mutex<Inbox>>>, body: Bytes) -> StatusCode {
    let body: Value = serde_json::from_slice(&body).unwrap();
    let stream = body["event"]["stream_id"].as_str().unwrap().to_owned();
    let id = body["event"]["id"].as_i64().unwrap();
    let refuse = {
        let mut i = inbox.lock().unwrap();
        i.requests += 1;
        i.in_flight += 1;
        i.max_in_flight = i.max_in_flight.max(i.in_flight);
        let busy = i.busy_streams.entry(stream.clone()).or_default();
        *busy += 1;
        if *busy > 1 {
            i.overlaps += 1;
        }
        let pos = i.refuse_once.iter().position(|r| *r == id);
        pos.map(|p| i.refuse_once.remove(p)).is_some()
    };
    // A receiver that takes 30 ms per request.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let mut i = inbox.lock().unwrap();
    i.in_flight -= 1;
    *i.busy_streams.get_mut(&stream).unwrap() -= 1;
    if refuse {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    i.accepted.push((stream, id));
    StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deliveries_keep_each_streams_order() {
    let db = shared(&["OrderPlaced"]).await;
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = Router::new().route("/hook", post(answer)).with_state(inbox.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    apply(
        &db.pool,
        &consumer(
            "wide",
            &format!(
                "delivery: Shared\nconcurrency: 8\nbatchSize: 50\nbackoff: {{initial: 100ms, max: 1s}}\n\
                 sink: {{webhook: {{url: '{url}'}}}}"
            ),
        ),
    )
    .await;
    // 12 streams, 10 events each, interleaved.
    let mut expected: HashMap<String, Vec<i64>> = HashMap::new();
    let mut tx = db.pool.begin().await.unwrap();
    for n in 0..10 {
        for s in 0..12 {
            let stream = format!("o-{s}");
            let id = append(&mut tx, &NewEvent::new("order", &stream, "OrderPlaced", json!({"n": n}))).await.unwrap();
            expected.entry(stream).or_default().push(id);
        }
    }
    tx.commit().await.unwrap();
    let total: usize = expected.values().map(Vec::len).sum();
    // One event of a stream fails once: its stream waits for it; the retry keeps its order.
    let failing = expected["o-3"][4];
    inbox.lock().unwrap().refuse_once.push(failing);

    let logs = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());
    eventually("every event delivered", Duration::from_secs(60), || async {
        let delivered: i64 =
            sqlx::query_scalar("SELECT delivered_count FROM highwater.consumer_shards WHERE consumer = 'wide'")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        delivered == total as i64
    })
    .await;
    let took = started.elapsed();
    let i = inbox.lock().unwrap();
    assert_eq!(i.overlaps, 0, "never two requests of one stream in flight at once");
    assert!(i.max_in_flight > 1 && i.max_in_flight <= 8, "up to 8 in flight: {}", i.max_in_flight);
    // Per stream, the first acceptance of each event is in order and every event is there.
    let mut seen: HashMap<&str, Vec<i64>> = HashMap::new();
    for (stream, id) in &i.accepted {
        let v = seen.entry(stream).or_default();
        if !v.contains(id) {
            v.push(*id);
        }
    }
    for (stream, ids) in &expected {
        assert_eq!(seen.get(stream.as_str()), Some(ids), "stream {stream}: every event, in order");
    }
    assert!(i.refuse_once.is_empty(), "the failure happened");
    // 120 requests of 30 ms one at a time take 3.6 s; 8 at a time, well under half of it.
    println!("{total} events in {took:?}, {} requests, at most {} in flight", i.requests, i.max_in_flight);
    assert!(took < Duration::from_millis(3600), "concurrent: {took:?}");
}
