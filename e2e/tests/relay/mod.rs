//! What the broker sinks' tests share: a throwaway PostgreSQL, a consumer definition, a real
//! `highwater dispatch` process, a writer, and the shard's state.
#![allow(dead_code)]

use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use highwater::{
    NewEvent, db,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    event_types,
};
use highwater_e2e::{chaos::fleet::highwater_bin, process::Process};
use serde_json::json;
use sqlx::PgPool;

pub const STREAM_TYPE: &str = "order";
pub const EVENT_TYPE: &str = "OrderPlaced";

pub struct Db {
    pub pg: EmbeddedPostgres,
    pub pool: PgPool,
    pub url: String,
}

pub async fn db() -> Db {
    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("start postgres");
    let url = pg.url();
    let pool = db::connect(&url, 10).await.expect("connect");
    db::migrate(&pool).await.expect("migrate");
    event_types::register(&pool, EVENT_TYPE, None, None).await.expect("register type");
    Db { pg, pool, url }
}

/// Applies one EventConsumer document (`spec` is the YAML under `spec:`) the way a user does:
/// `highwater consumer apply -f FILE`.
pub async fn apply(db: &Db, name: &str, spec: &str) {
    let indented: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    let yaml = format!(
        "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {name}}}\nspec:\n{indented}"
    );
    let file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let out = tokio::process::Command::new(highwater_bin().expect("the highwater binary"))
        .args(["consumer", "apply", "-f"])
        .arg(file.path())
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .expect("run highwater consumer apply");
    assert!(out.status.success(), "consumer apply {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A `highwater dispatch` process with `env` added to its environment.
pub struct Dispatcher {
    pub process: Process,
    /// Port of its /metrics.
    pub port: u16,
}

impl Dispatcher {
    /// The value of the sample `name{labels...}` on its /metrics, if present.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let body = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.port)).await.ok()?.text().await.ok()?;
        body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            let all = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            (metric == name && all).then(|| value.parse().ok()).flatten()
        })
    }
}

pub fn dispatcher(url: &str, logs: &Path, env: &[(&str, &str)]) -> Dispatcher {
    let port = highwater::embedded::free_port().unwrap();
    let mut cmd = Command::new(highwater_bin().expect("the highwater binary"));
    cmd.args(["dispatch", "--instance-id", "relay-0", "--poll-interval", "20ms", "--shutdown-grace", "5s"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", url)
        .env("HIGHWATER_LOG", "info,sqlx=warn")
        .envs(env.iter().copied());
    let process = Process::spawn("highwater", cmd, &logs.join("dispatcher.log")).expect("start the dispatcher");
    Dispatcher { process, port }
}

/// Appends events round-robin over a fixed set of streams, each with its stream version and a
/// payload `{"stream", "seq"}` (seq = the version), one transaction per event.
#[derive(Clone)]
pub struct Writer {
    pool: PgPool,
    streams: usize,
    versions: BTreeMap<String, i64>,
    appended: usize,
}

impl Writer {
    pub fn new(pool: &PgPool, streams: usize) -> Writer {
        Writer { pool: pool.clone(), streams, versions: BTreeMap::new(), appended: 0 }
    }

    /// Accounts for `n` events a clone appended (the clone kept its own counts).
    pub fn skip(&mut self, n: usize) {
        for _ in 0..n {
            let stream = format!("o-{}", self.appended % self.streams);
            *self.versions.entry(stream).or_insert(0) += 1;
            self.appended += 1;
        }
    }

    /// `n` events, `pause` apart; their ids in append order.
    pub async fn append(&mut self, n: usize, pause: Duration) -> Vec<i64> {
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let i = self.appended;
            let stream = format!("o-{}", i % self.streams);
            let v = self.versions.entry(stream.clone()).or_insert(0);
            let mut conn = self.pool.acquire().await.expect("connection");
            let id = highwater::append(
                &mut conn,
                &NewEvent {
                    stream_type: STREAM_TYPE.into(),
                    stream_id: stream.clone(),
                    event_type: EVENT_TYPE.into(),
                    payload: json!({"stream": stream, "seq": *v + 1}),
                    metadata: Some(match writer_trace(i) {
                        Some((parent, state)) => {
                            json!({"correlation_id": format!("corr-{i}"), "traceparent": parent, "tracestate": state})
                        }
                        None => json!({"correlation_id": format!("corr-{i}")}),
                    }),
                    tenant_id: None,
                    expected_version: Some(*v),
                },
            )
            .await
            .expect("append");
            *v += 1;
            self.appended += 1;
            ids.push(id);
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        ids
    }
}

/// The writer's trace context (`traceparent`, `tracestate`) of the writer's `i`th event: every
/// other event is appended inside a trace of its own (issue 48), the rest without one.
pub fn writer_trace(i: usize) -> Option<(String, String)> {
    (i % 2 == 1).then(|| (format!("00-{:032x}-00f067aa0ba902b7-01", i + 1), format!("hw={i}")))
}

/// A record's trace headers are its writer's when it had one (found by the correlation id
/// `corr-{i}` the writer gave it), else a made-up `traceparent` without `tracestate`.
pub fn check_trace(headers: &BTreeMap<String, String>) {
    let i: usize = headers["highwater-correlation-id"].trim_start_matches("corr-").parse().expect("corr-N");
    match writer_trace(i) {
        Some((parent, state)) => {
            assert_eq!(headers["traceparent"], parent, "{headers:?}");
            assert_eq!(headers["tracestate"], state, "{headers:?}");
        }
        None => {
            assert!(headers["traceparent"].starts_with("00-"), "{headers:?}");
            assert!(!headers.contains_key("tracestate"), "{headers:?}");
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ShardState {
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub cursor_id: i64,
}

pub async fn shard(pool: &PgPool, consumer: &str) -> ShardState {
    sqlx::query_as("SELECT status, attempts, last_error, cursor_id FROM highwater.consumer_shards WHERE consumer = $1")
        .bind(consumer)
        .fetch_one(pool)
        .await
        .expect("the shard exists")
}

/// Waits until the shard's cursor is at `last` (every event up to it acknowledged).
pub async fn wait_caught_up(pool: &PgPool, consumer: &str, last: i64, timeout: Duration) {
    highwater_e2e::eventually(&format!("{consumer} delivered up to event {last}"), timeout, || async {
        shard(pool, consumer).await.cursor_id >= last
    })
    .await;
}

/// Waits until the shard's `last_error` contains `needle`; returns the state then.
pub async fn wait_error(pool: &PgPool, consumer: &str, needle: &str, timeout: Duration) -> ShardState {
    let what = format!("{consumer}'s last_error contains {needle:?}");
    highwater_e2e::wait_for(&what, timeout, || async {
        let s = shard(pool, consumer).await;
        let hit = s.last_error.as_deref().is_some_and(|e| e.contains(needle));
        Ok::<_, std::convert::Infallible>(hit.then_some(s))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until the shard is dead; returns its state.
pub async fn wait_dead(pool: &PgPool, consumer: &str, timeout: Duration) -> ShardState {
    highwater_e2e::eventually(&format!("{consumer} is dead"), timeout, || async {
        shard(pool, consumer).await.status == "dead"
    })
    .await;
    shard(pool, consumer).await
}
