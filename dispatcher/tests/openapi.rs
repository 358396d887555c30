//! docs/openapi.json against the real server: `GET /openapi.json` serves exactly the committed
//! document; the router's routes (read from its source) are the document's paths; and every
//! status code the document lists for an operation is reached here, each with a documented
//! content type, while nothing undocumented comes back (the database is stopped at the end for
//! the 503s). e2e/openapi/schemathesis.sh fuzzes the same document.
mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use common::*;
use highwater::{NewEvent, append};
use serde_json::{Value, json};

const DOC: &str = include_str!("../../docs/openapi.json");
const ROUTER: &str = include_str!("../../engine/src/http.rs");
const TOKEN: &str = "openapi-t0ken";
const OPS_TOKEN: &str = "openapi-ops-t0ken";

/// (path, method) -> status -> documented media types.
type Documented = BTreeMap<(String, String), BTreeMap<u16, Vec<String>>>;
/// A request to the stream endpoint: URL, with the token, headers, the status expected.
type StreamCase<'a> = (&'a str, bool, &'a [(&'a str, &'a str)], u16);

/// The paths of the `.route("...", ...)` calls in the router's source, in OpenAPI's spelling
/// (axum's `{name}` is the same).
fn router_paths() -> BTreeSet<String> {
    ROUTER.split(".route(\"").skip(1).map(|rest| rest[..rest.find('"').unwrap()].to_owned()).collect()
}

fn documented(doc: &Value) -> Documented {
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let mut statuses = BTreeMap::new();
            for (code, resp) in op["responses"].as_object().unwrap() {
                let resp = match resp.get("$ref").and_then(Value::as_str) {
                    Some(r) => &doc["components"]["responses"][r.rsplit('/').next().unwrap()],
                    None => resp,
                };
                let types = resp["content"].as_object().map(|c| c.keys().cloned().collect()).unwrap_or_default();
                statuses.insert(code.parse().expect("numeric status codes only"), types);
            }
            out.insert((path.clone(), method.to_uppercase()), statuses);
        }
    }
    out
}

struct Seen {
    /// (documented path, method) -> status codes answered.
    got: BTreeMap<(String, String), BTreeSet<u16>>,
    problems: Vec<String>,
}

impl Seen {
    /// Sends GET `url` (relative), records its status under `doc_path`, checks the status and
    /// the content type are documented, and returns the status and the body (not read for
    /// event streams).
    async fn get(
        &mut self,
        doc: &Documented,
        port: u16,
        doc_path: &str,
        url: &str,
        auth: bool,
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        let mut req = reqwest::Client::new().get(format!("http://127.0.0.1:{port}{url}"));
        if auth {
            req = req.bearer_auth(TOKEN);
        }
        self.send(doc, "GET", doc_path, url, req, headers).await
    }

    /// POST `body` to `url` with `token` (if any), as [`Seen::get`] records and checks it.
    async fn post(
        &mut self,
        doc: &Documented,
        port: u16,
        doc_path: &str,
        url: &str,
        token: Option<&str>,
        body: &str,
    ) -> (u16, String) {
        let mut req = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}{url}"))
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(doc, "POST", doc_path, url, req, &[]).await
    }

    async fn send(
        &mut self,
        doc: &Documented,
        method: &str,
        doc_path: &str,
        url: &str,
        mut req: reqwest::RequestBuilder,
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = tokio::time::timeout(Duration::from_secs(30), req.send())
            .await
            .unwrap_or_else(|_| panic!("{method} {url} {headers:?} unanswered within 30s"))
            .unwrap();
        let status = resp.status().as_u16();
        let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let key = (doc_path.to_owned(), method.to_owned());
        self.got.entry(key.clone()).or_default().insert(status);
        match doc.get(&key).and_then(|s| s.get(&status)) {
            None => self.problems.push(format!("{method} {url}: {status} is not documented for {doc_path}")),
            Some(types) if !types.iter().any(|t| ct.split(';').next().unwrap().trim() == t) => {
                self.problems.push(format!("{method} {url}: {status} with content type {ct:?}, documented {types:?}"))
            }
            Some(_) => {}
        }
        let body = if ct.starts_with("text/event-stream") { String::new() } else { resp.text().await.unwrap() };
        assert!(!body.starts_with("no such endpoint"), "{method} {url} reached no route (the router's fallback)");
        (status, body)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_served_and_true_to_the_server() {
    let doc: Value = serde_json::from_str(DOC).expect("docs/openapi.json is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    let paths: BTreeSet<String> = doc["paths"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(router_paths(), paths, "the router's routes are the document's paths");
    let ops = documented(&doc);
    let redrive = "/v1/consumers/{name}/redrive";
    let replay = "/v1/consumers/{name}/replay";
    let discard = "/v1/consumers/{name}/discard";
    assert!(
        ops.keys().all(|(p, m)| m == if [redrive, replay, discard].contains(&p.as_str()) { "POST" } else { "GET" }),
        "the router has GET routes only, and POST for the redrive, the replay and the discard"
    );

    let mut pg = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (id bigint)").execute(&pg.pool).await.unwrap();
    let yaml = [
        consumer("live", "delivery: PerInstance\nsink: {sse: {buffer: 64}}"),
        consumer("proj", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen VALUES ($2)'}}"),
        consumer("paused", "delivery: Shared\nsuspend: true\nsink: {log: {target: stderr}}"),
    ]
    .concat();
    apply(&pg.pool, &yaml).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(
        &pg.url,
        "oa-0",
        logs.path(),
        &[("HIGHWATER_SSE_TOKENS", TOKEN), ("HIGHWATER_OPS_TOKENS", OPS_TOKEN)],
    );
    let port = d.http_port;
    wait_registered(&pg.pool, "live", 1).await;
    eventually("/readyz 200", Duration::from_secs(30), || async move {
        matches!(reqwest::get(format!("http://127.0.0.1:{port}/readyz")).await, Ok(r) if r.status() == 200)
    })
    .await;

    let mut s = Seen { got: BTreeMap::new(), problems: Vec::new() };
    let (status, served) = s.get(&ops, port, "/openapi.json", "/openapi.json", false, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(served, DOC, "GET /openapi.json serves docs/openapi.json byte for byte");
    assert_eq!(s.get(&ops, port, "/healthz", "/healthz", false, &[]).await.0, 200);
    assert_eq!(s.get(&ops, port, "/readyz", "/readyz", false, &[]).await.0, 200);
    let (status, metrics) = s.get(&ops, port, "/metrics", "/metrics", false, &[]).await;
    assert_eq!(status, 200);
    assert!(metrics.contains("highwater_ready"));

    // A write and its token.
    let mut tx = pg.pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    let token: String = sqlx::query_scalar("SELECT highwater.token()::text").fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();

    let applied = "/v1/consumers/{name}/applied";
    let cases: &[(&str, bool, u16)] = &[
        (&format!("/v1/consumers/proj/applied?after={token}&timeout=30s"), true, 200),
        ("/v1/consumers/proj/applied", true, 400),
        ("/v1/consumers/proj/applied?after=abc", true, 400),
        ("/v1/consumers/proj/applied?after=5&timeout=forever", true, 400),
        ("/v1/consumers/proj/applied?after=5&timeout=1h", true, 400),
        ("/v1/consumers/proj/applied?after=18446744073709551615", true, 400),
        ("/v1/consumers/proj/applied?after=5&instance=x", true, 400),
        // NUL cannot reach PostgreSQL: refused, not a 503 (schemathesis found it).
        ("/v1/consumers/pr%00oj/applied?after=5", true, 400),
        ("/v1/consumers/proj/applied?after=5&instance=%00", true, 400),
        ("/v1/consumers/proj/applied?after=5&after=6", true, 400),
        ("/v1/consumers/proj/applied?after=5", false, 401),
        ("/v1/consumers/nope/applied?after=5", true, 404),
        (&format!("/v1/consumers/paused/applied?after={token}&timeout=300ms"), true, 408),
    ];
    for (url, auth, want) in cases {
        let (status, body) = s.get(&ops, port, applied, url, *auth, &[]).await;
        assert_eq!(status, *want, "GET {url}: {body}");
    }

    let events = "/v1/consumers/{name}/events";
    let last = id.to_string();
    let cases: &[StreamCase] = &[
        ("/v1/consumers/live/events", true, &[], 200),
        ("/v1/consumers/live/events?tenant=t", true, &[("Last-Event-ID", &last)], 200),
        ("/v1/consumers/live/events", true, &[("Last-Event-ID", "12abc")], 400),
        ("/v1/consumers/live/events", true, &[("Last-Event-ID", "999999")], 400),
        ("/v1/consumers/live/events", false, &[], 401),
        ("/v1/consumers/proj/events", true, &[], 404),
    ];
    for (url, auth, headers, want) in cases {
        assert_eq!(s.get(&ops, port, events, url, *auth, headers).await.0, *want, "GET {url} {headers:?}");
    }

    // The redrive of a dead letter of proj (parked as errorMode skip would have).
    sqlx::query(
        "INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error)
         VALUES ('proj', '__shared__', $1, 1, 'boom')",
    )
    .bind(id)
    .execute(&pg.pool)
    .await
    .unwrap();
    let one = format!("{{\"event\": {id}, \"reason\": \"openapi\"}}");
    let dry = format!("{{\"event\": {id}, \"dryRun\": true}}");
    let ops_token = Some(OPS_TOKEN);
    let cases: &[(&str, Option<&str>, &str, u16)] = &[
        ("/v1/consumers/proj/redrive", ops_token, &dry, 200),
        ("/v1/consumers/proj/redrive", ops_token, "not json", 400),
        ("/v1/consumers/proj/redrive", ops_token, "{}", 400),
        ("/v1/consumers/proj/redrive", ops_token, r#"{"all": true, "rate": -1}"#, 400),
        ("/v1/consumers/proj/redrive", ops_token, r#"{"all": true, "nonsense": 1}"#, 400),
        ("/v1/consumers/proj/redrive", None, &one, 401),
        // A token of the streams and the wait cannot redeliver.
        ("/v1/consumers/proj/redrive", Some(TOKEN), &one, 401),
        ("/v1/consumers/nope/redrive", ops_token, &one, 404),
        ("/v1/consumers/proj/redrive", ops_token, r#"{"event": 999999}"#, 409),
        ("/v1/consumers/proj/redrive", ops_token, &one, 202),
        // Requested already: pending or redriven, no longer a dead letter to redrive.
        ("/v1/consumers/proj/redrive", ops_token, &one, 409),
    ];
    for (url, token, body, want) in cases {
        let (status, answer) = s.post(&ops, port, redrive, url, *token, body).await;
        assert_eq!(status, *want, "POST {url} {body}: {answer}");
        if *want == 202 {
            let plan: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(plan["selected"][0]["event_id"], id, "{answer}");
            assert!(plan["requested_at"].is_string(), "{answer}");
        }
    }
    let by: Option<String> = sqlx::query_scalar("SELECT redrive_by FROM highwater.dead_letters WHERE event_id = $1")
        .bind(id)
        .fetch_one(&pg.pool)
        .await
        .unwrap();
    assert_eq!(by.as_deref(), Some("http:ops-token-1"));

    // The replay of a stream that proj has delivered.
    let mut tx = pg.pool.begin().await.unwrap();
    let other = append(&mut tx, &NewEvent::new("s", "2", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    eventually("proj delivered the event of s/2", Duration::from_secs(30), || {
        let pool = pg.pool.clone();
        async move {
            let c: i64 = sqlx::query_scalar("SELECT cursor_id FROM highwater.consumer_shards WHERE consumer = 'proj'")
                .fetch_one(&pool)
                .await
                .unwrap();
            c >= other
        }
    })
    .await;
    let stream = r#"{"stream": "s/2", "reason": "openapi"}"#;
    let cases: &[(&str, Option<&str>, &str, u16)] = &[
        ("/v1/consumers/proj/replay", ops_token, r#"{"stream": "s/2", "dryRun": true}"#, 200),
        ("/v1/consumers/proj/replay", ops_token, "not json", 400),
        ("/v1/consumers/proj/replay", ops_token, "{}", 400),
        ("/v1/consumers/proj/replay", ops_token, r#"{"stream": "no-slash"}"#, 400),
        ("/v1/consumers/proj/replay", ops_token, r#"{"stream": "s/2", "nonsense": 1}"#, 400),
        ("/v1/consumers/proj/replay", None, stream, 401),
        ("/v1/consumers/proj/replay", Some(TOKEN), stream, 401),
        ("/v1/consumers/nope/replay", ops_token, stream, 404),
        ("/v1/consumers/proj/replay", ops_token, r#"{"stream": "s/404"}"#, 409),
        ("/v1/consumers/proj/replay", ops_token, stream, 202),
    ];
    for (url, token, body, want) in cases {
        let (status, answer) = s.post(&ops, port, replay, url, *token, body).await;
        assert_eq!(status, *want, "POST {url} {body}: {answer}");
        if *want == 202 {
            let plan: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(plan["selected"][0]["event_id"], other, "{answer}");
            assert!(plan["request_id"].is_i64() && plan["requested_at"].is_string(), "{answer}");
        }
    }
    let by: String = sqlx::query_scalar("SELECT requested_by FROM highwater.replays WHERE event_id = $1")
        .bind(other)
        .fetch_one(&pg.pool)
        .await
        .unwrap();
    assert_eq!(by, "http:ops-token-1");

    // The discard of a dead letter of proj that blocks its stream (as errorMode skipStream
    // parks them): the one parked behind it is released.
    let mut tx = pg.pool.begin().await.unwrap();
    let blocker = append(&mut tx, &NewEvent::new("s", "3", "Tick", json!({}))).await.unwrap();
    let parked = append(&mut tx, &NewEvent::new("s", "3", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    sqlx::query(
        "INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error, blocked_by)
         VALUES ('proj', '__shared__', $1, 1, 'boom', NULL), ('proj', '__shared__', $2, 0, 'blocked', $1)",
    )
    .bind(blocker)
    .bind(parked)
    .execute(&pg.pool)
    .await
    .unwrap();
    let discard_one = format!("{{\"event\": {blocker}, \"reason\": \"openapi\"}}");
    let discard_parked = format!("{{\"event\": {parked}, \"reason\": \"openapi\"}}");
    let cases: &[(&str, Option<&str>, &str, u16)] = &[
        ("/v1/consumers/proj/discard", ops_token, "not json", 400),
        ("/v1/consumers/proj/discard", ops_token, "{}", 400),
        ("/v1/consumers/proj/discard", ops_token, &format!("{{\"event\": {blocker}, \"reason\": \" \"}}"), 400),
        (
            "/v1/consumers/proj/discard",
            ops_token,
            &format!("{{\"event\": {blocker}, \"reason\": \"x\", \"yes\": 1}}"),
            400,
        ),
        ("/v1/consumers/proj/discard", None, &discard_one, 401),
        // A token of the streams and the wait cannot discard.
        ("/v1/consumers/proj/discard", Some(TOKEN), &discard_one, 401),
        ("/v1/consumers/nope/discard", ops_token, &discard_one, 404),
        ("/v1/consumers/proj/discard", ops_token, r#"{"event": 999999, "reason": "x"}"#, 409),
        ("/v1/consumers/proj/discard", ops_token, &discard_parked, 409),
        ("/v1/consumers/proj/discard", ops_token, &discard_one, 200),
        // Discarded already.
        ("/v1/consumers/proj/discard", ops_token, &discard_one, 409),
    ];
    for (url, token, body, want) in cases {
        let (status, answer) = s.post(&ops, port, discard, url, *token, body).await;
        assert_eq!(status, *want, "POST {url} {body}: {answer}");
        if *want == 200 {
            let d: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!((d["event_id"].as_i64(), d["released"].clone()), (Some(blocker), json!([parked])), "{answer}");
        }
    }
    let by: Option<String> = sqlx::query_scalar("SELECT discarded_by FROM highwater.dead_letters WHERE event_id = $1")
        .bind(blocker)
        .fetch_one(&pg.pool)
        .await
        .unwrap();
    assert_eq!(by.as_deref(), Some("http:ops-token-1"));

    // Without the database: the 503s.
    pg.pg.stop();
    assert_eq!(s.get(&ops, port, "/readyz", "/readyz", false, &[]).await.0, 503);
    let (status, body) =
        s.get(&ops, port, applied, &format!("/v1/consumers/proj/applied?after={token}&timeout=1s"), true, &[]).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(s.get(&ops, port, events, "/v1/consumers/live/events", true, &[("Last-Event-ID", &last)]).await.0, 503);
    assert_eq!(s.post(&ops, port, redrive, "/v1/consumers/proj/redrive", ops_token, r#"{"all": true}"#).await.0, 503);
    assert_eq!(s.post(&ops, port, replay, "/v1/consumers/proj/replay", ops_token, stream).await.0, 503);
    assert_eq!(s.post(&ops, port, discard, "/v1/consumers/proj/discard", ops_token, &discard_one).await.0, 503);

    assert!(s.problems.is_empty(), "answers the document does not describe:\n{}", s.problems.join("\n"));
    for (op, statuses) in &ops {
        let got = s.got.get(op).cloned().unwrap_or_default();
        let want: BTreeSet<u16> = statuses.keys().copied().collect();
        assert_eq!(got, want, "{op:?}: every documented status code reached, nothing else");
    }
    // A path the router does not have: 404 in plain text, not an empty body.
    let r = reqwest::get(format!("http://127.0.0.1:{port}/v1/nothing")).await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    drop(d);
}
