//! Test harness: a throwaway PostgreSQL database per test (on a cluster of its own, or on the
//! test binary's shared cluster), real `highwater` processes.
#![allow(dead_code)]

use std::{
    ops::{Deref, DerefMut},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use highwater::{
    db, definitions,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    event_types,
};
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use sqlx::PgPool;

pub struct TestDb {
    pub pool: PgPool,
    pub url: String,
    pub pg: Cluster,
}

/// The cluster a [`TestDb`] is on.
pub enum Cluster {
    /// Its own: the test may restart, kill or reconfigure it. (Boxed: the other variant is a
    /// reference.)
    Own(Box<EmbeddedPostgres>),
    /// The test binary's, shared with the other tests of the binary ([`shared`]).
    Shared(&'static EmbeddedPostgres),
}

impl From<EmbeddedPostgres> for Cluster {
    fn from(pg: EmbeddedPostgres) -> Self {
        Cluster::Own(Box::new(pg))
    }
}

impl Deref for Cluster {
    type Target = EmbeddedPostgres;

    fn deref(&self) -> &EmbeddedPostgres {
        match self {
            Cluster::Own(pg) => pg,
            Cluster::Shared(pg) => pg,
        }
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut EmbeddedPostgres {
        match self {
            Cluster::Own(pg) => pg,
            Cluster::Shared(_) => {
                panic!("this test stops or restarts the shared cluster: give it a cluster of its own with `setup`")
            }
        }
    }
}

/// A new cluster, migrated, with the event types `types` registered (no schema). For the tests
/// that hold transactions open, read the fence or `pg_stat_*`, create roles, cross transaction-id
/// boundaries or restart the server: everything else can use [`shared`].
pub async fn setup(types: &[&str]) -> TestDb {
    setup_on(EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("start postgres"), types).await
}

/// A new database of the test binary's shared cluster, cloned from its migrated template, with
/// the event types `types` registered (highwater_testkit::shared_db).
pub async fn shared(types: &[&str]) -> TestDb {
    let db = highwater_testkit::shared_db(types).await;
    TestDb { pool: db.pool, url: db.url, pg: Cluster::Shared(db.cluster) }
}

/// [`setup`] on a cluster whose transaction counter starts at `next_xid` (an `xid8`).
pub async fn setup_at(types: &[&str], next_xid: u64) -> TestDb {
    let pg = highwater_testkit::start_at(EmbeddedOptions::default(), next_xid).await.expect("start postgres");
    setup_on(pg, types).await
}

async fn setup_on(pg: EmbeddedPostgres, types: &[&str]) -> TestDb {
    let url = pg.url();
    let pool = db::connect(&url, 20).await.expect("connect");
    db::migrate(&pool).await.expect("migrate");
    for t in types {
        event_types::register(&pool, t, None, None).await.expect("register type");
    }
    TestDb { pool, url, pg: pg.into() }
}

pub async fn apply(pool: &PgPool, yaml: &str) {
    let defs = definitions::parse(yaml, "test").expect("parse definitions");
    definitions::apply(pool, &defs).await.expect("apply definitions");
}

/// An EventConsumer document.
pub fn consumer(name: &str, spec: &str) -> String {
    let indented: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {name}}}\nspec:\n{indented}"
    )
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_highwater")
}

/// A `highwater dispatch` process.
pub struct Dispatcher {
    pub child: Child,
    pub instance: String,
    pub http_port: u16,
}

impl Dispatcher {
    pub fn start(url: &str, instance: &str, log_dir: &Path) -> Self {
        Self::start_with_env(url, instance, log_dir, &[])
    }

    /// Starts with extra environment variables. Its HTTP server listens on a free loopback port
    /// (`http_port`).
    pub fn start_with_env(url: &str, instance: &str, log_dir: &Path, env: &[(&str, &str)]) -> Self {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_dir.join(format!("{instance}.log")))
            .unwrap();
        let http_port = highwater::embedded::free_port().unwrap();
        let child = Command::new(bin())
            .args(["dispatch", "--instance-id", instance, "--poll-interval", "20ms", "--shutdown-grace", "10s"])
            .args(["--listen", &format!("127.0.0.1:{http_port}")])
            .env("DATABASE_URL", url)
            .env("HIGHWATER_LOG", "info,sqlx=warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn dispatcher");
        Dispatcher { child, instance: instance.to_owned(), http_port }
    }

    /// Waits until its HTTP server accepts connections: the listener is bound after the
    /// process has connected and registered its shards, so a request made right after
    /// `wait_registered` can still be refused.
    pub async fn serving(&self) {
        let port = self.http_port;
        eventually("the dispatcher to accept HTTP connections", Duration::from_secs(30), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
    }

    pub fn signal(&self, s: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), s);
    }

    pub fn sigkill(mut self) {
        self.signal(Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// SIGTERM and wait; returns the exit code.
    pub fn terminate(mut self, within: Duration) -> Option<i32> {
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` until it is true, panicking with `what` once `timeout` passes. The same signature as
/// `highwater_e2e::eventually` (this crate cannot depend on the e2e harness, which depends on it).
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// Waits until the count query `sql` returns at least `n`.
pub async fn wait_count(pool: &PgPool, sql: &'static str, n: i64, timeout: Duration) {
    let pool = pool.clone();
    eventually(sql, timeout, || {
        let pool = pool.clone();
        async move { scalar_i64(&pool, sql).await >= n }
    })
    .await;
}

pub async fn scalar_i64(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// Waits until `n` per-instance shards of `consumer` exist (their processes have registered).
pub async fn wait_registered(pool: &PgPool, consumer: &str, n: i64) {
    let pool = pool.clone();
    let consumer = consumer.to_owned();
    eventually("dispatchers to register", Duration::from_secs(60), || {
        let pool = pool.clone();
        let consumer = consumer.clone();
        async move {
            let c: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.consumer_shards WHERE consumer = $1")
                .bind(&consumer)
                .fetch_one(&pool)
                .await
                .unwrap();
            c >= n
        }
    })
    .await;
}

/// A minimal SSE reader: (id, data) of each event until `n` arrived or the stream ended.
pub async fn read_sse(resp: &mut reqwest::Response, n: usize, within: Duration) -> Vec<(i64, serde_json::Value)> {
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while out.len() < n {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => break,
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let mut id = None;
            let mut data = None;
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = serde_json::from_str(v.trim()).ok();
                }
            }
            if let (Some(i), Some(d)) = (id, data) {
                out.push((i, d));
            }
        }
    }
    out
}
