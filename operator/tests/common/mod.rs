//! A real control plane, a real PostgreSQL and real operator processes.
#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use highwater::{
    db,
    embedded::{EmbeddedOptions, EmbeddedPostgres, free_port},
    event_types,
};
use highwater_e2e::ControlPlane;
pub use highwater_e2e::eventually;
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use sqlx::PgPool;

pub struct World {
    pub cp: ControlPlane,
    pub pool: PgPool,
    pub url: String,
    pub logs: tempfile::TempDir,
    pub pg: EmbeddedPostgres,
}

pub fn crd_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds/eventconsumer.yaml")
}

pub fn event_type_crd_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds/eventtype.yaml")
}

/// Control plane with the CRDs (EventConsumer, EventType) installed and namespace `shop` ready for pods; PostgreSQL migrated.
pub async fn world(types: &[&str]) -> World {
    let cp = ControlPlane::start().await.expect("control plane");
    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("postgres");
    let url = pg.url();
    let pool = db::connect(&url, 10).await.unwrap();
    db::migrate(&pool).await.unwrap();
    for t in types {
        event_types::register(&pool, t, None, None).await.unwrap();
    }
    cp.kubectl_ok(["apply", "-f", crd_path().to_str().unwrap(), "-f", event_type_crd_path().to_str().unwrap()])
        .await
        .unwrap();
    for crd in ["crd/eventconsumers.highwater.dev", "crd/eventtypes.highwater.dev"] {
        cp.kubectl_ok(["wait", "--for", "condition=established", crd, "--timeout=60s"]).await.unwrap();
    }
    cp.kubectl_ok(["create", "namespace", "shop"]).await.unwrap();
    // No controller manager runs: create the ServiceAccounts pods need.
    for ns in ["shop", "default"] {
        let _ = cp.kubectl(["create", "serviceaccount", "default", "-n", ns]).await;
    }
    World { cp, pool, url, logs: tempfile::tempdir().unwrap(), pg }
}

pub struct Operator {
    pub child: Child,
    pub port: u16,
    pub identity: String,
    pub log: PathBuf,
}

impl Operator {
    pub fn start(w: &World, identity: &str, leader_election: bool) -> Operator {
        Self::start_at(&w.cp, &w.url, w.logs.path(), identity, &["--leader-election", &leader_election.to_string()])
    }

    /// An operator against any database URL (one that may not answer yet), with extra arguments.
    pub fn start_at(cp: &ControlPlane, url: &str, logs: &Path, identity: &str, args: &[&str]) -> Operator {
        Self::start_with_env(cp, url, logs, identity, args, &[])
    }

    /// [`Operator::start_at`] with extra environment variables (e.g. `OTEL_*`).
    pub fn start_with_env(
        cp: &ControlPlane,
        url: &str,
        logs: &Path,
        identity: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let port = free_port().unwrap();
        let log = logs.join(format!("{identity}.log"));
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_highwater-operator"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--gc-interval", "2s", "--status-interval", "1s"])
            .args(args)
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("DATABASE_URL", url)
            .env("POD_NAME", identity)
            .env("POD_NAMESPACE", "default")
            .env("HIGHWATER_LOG", "info,kube=warn,sqlx=warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("start the operator");
        Operator { child, port, identity: identity.to_owned(), log }
    }

    pub fn signal(&self, s: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), s);
    }

    /// SIGTERM and wait for the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.signal(Signal::SIGTERM);
        // Generous: a CI machine running the version matrix once took more than 30 s here.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Still running: what it was doing goes into the test's output, so the failure names it.
        eprintln!("operator {} did not exit within 60 s of SIGTERM; its log:\n{}", self.identity, self.log());
        None
    }

    pub fn kill(mut self) {
        self.signal(Signal::SIGKILL);
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn metric(&self, name: &str) -> Option<f64> {
        let body = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.port)).await.ok()?.text().await.ok()?;
        body.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn apply(w: &World, yaml: &str) -> std::process::Output {
    w.cp.kubectl_with_input(["apply", "-f", "-"], yaml).await.unwrap()
}

pub fn pod(name: &str, ns: &str, group: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{highwater.dev/group: {group}}}}}\n\
         spec:\n  automountServiceAccountToken: false\n  containers: [{{name: d, image: highwater:dev}}]\n---\n"
    )
}

pub async fn shards(pool: &PgPool, consumer: &str) -> Vec<(String, Option<String>)> {
    sqlx::query_as(
        "SELECT instance_id, pod_uid FROM highwater.consumer_shards WHERE consumer = $1 ORDER BY instance_id",
    )
    .bind(consumer)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The distinct statuses of the consumer's shards, sorted.
pub async fn shard_statuses(pool: &PgPool, consumer: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT DISTINCT status FROM highwater.consumer_shards WHERE consumer = $1 ORDER BY 1")
        .bind(consumer)
        .fetch_all(pool)
        .await
        .unwrap()
}

pub async fn uid(w: &World, ns: &str, pod: &str) -> String {
    w.cp.kubectl_ok(["get", "pod", pod, "-n", ns, "-o", "jsonpath={.metadata.uid}"]).await.unwrap()
}
