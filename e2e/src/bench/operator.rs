//! Scenario 6, operator: on the e2e control plane (kube-apiserver + etcd from the cache of
//! `e2e/control-plane/build.sh`), a real `highwater-operator` process against the benchmark's
//! PostgreSQL. Figures: time from a dispatcher pod's deletion (the API server has accepted it)
//! to its per-instance shard's removal, one pod at a time; and EventConsumers reconciled into
//! rows per second, from the start of one `kubectl apply` of all of them to the last row.
//! The pods never run (no node): the operator only watches them.
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::ControlPlane;
use anyhow::{Context, Result, bail};
use nix::sys::signal::Signal;

use super::{BenchDb, Report, Sizes, report::per_s};

const S: &str = "6 operator";
const NS: &str = "bench";

/// `$HIGHWATER_OPERATOR_BIN`, else `highwater-operator` beside this executable (the same
/// target directory and profile).
fn operator_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HIGHWATER_OPERATOR_BIN") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().context("executable without a directory")?.to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("highwater-operator");
    if !bin.is_file() {
        bail!(
            "{} is missing\n  fix: cargo build -p highwater-operator (with --release for a release bench), \
             or set HIGHWATER_OPERATOR_BIN",
            bin.display()
        );
    }
    Ok(bin)
}

struct OperatorProc(Child);

impl Drop for OperatorProc {
    fn drop(&mut self) {
        highwater::embedded::stop_child(&mut self.0, Signal::SIGTERM, Duration::from_secs(5));
    }
}

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}, labels: {{highwater.dev/group: bench}}}}\n\
         spec:\n  automountServiceAccountToken: false\n  containers: [{{name: d, image: highwater:dev}}]\n---\n"
    )
}

fn consumer(name: &str, group: &str, delivery: &str) -> String {
    format!(
        "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         spec:\n  delivery: {delivery}\n  group: {group}\n  sink: {{log: {{target: stderr}}}}\n---\n"
    )
}

async fn apply(cp: &ControlPlane, dir: &std::path::Path, file: &str, yaml: &str) -> Result<()> {
    let path = dir.join(file);
    std::fs::write(&path, yaml)?;
    cp.kubectl_ok(["apply", "-f", path.to_str().context("path")?]).await?;
    Ok(())
}

async fn count(pool: &sqlx::PgPool, sql: &str) -> Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(pool).await?)
}

async fn wait_count(pool: &sqlx::PgPool, sql: &str, want: i64, timeout: Duration) -> Result<Duration> {
    let started = Instant::now();
    loop {
        let n = count(pool, sql).await?;
        if n == want {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!("{sql}: {n}, not {want}, after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let bin = operator_bin()?;
    let db = bench.scenario("operator").await?;
    let cp = ControlPlane::start().await.context("starting the e2e control plane")?;
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds/eventconsumer.yaml");
    cp.kubectl_ok(["apply", "-f", crd.to_str().context("path")?]).await?;
    cp.kubectl_ok(["wait", "--for", "condition=established", "crd/eventconsumers.highwater.dev", "--timeout=60s"])
        .await?;
    cp.kubectl_ok(["create", "namespace", NS]).await?;
    let _ = cp.kubectl(["create", "serviceaccount", "default", "-n", NS]).await;
    let tmp = tempfile::tempdir()?;
    let port = highwater::embedded::free_port()?;
    let _op = OperatorProc(
        Command::new(&bin)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--leader-election", "false"])
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("DATABASE_URL", &db.url)
            .env("POD_NAME", "bench-operator")
            .env("POD_NAMESPACE", "default")
            .env("HIGHWATER_LOG", "warn,kube=error,sqlx=error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?,
    );

    // Pod deletion to shard removal.
    apply(&cp, tmp.path(), "live.yaml", &consumer("live", "bench", "PerInstance")).await?;
    let n = sizes.operator_deletions;
    let pods: String = (0..n).map(|i| pod(&format!("d-{i}"))).collect();
    apply(&cp, tmp.path(), "pods.yaml", &pods).await?;
    let shards = "SELECT count(*) FROM highwater.consumer_shards WHERE consumer = 'live'";
    wait_count(&db.pool, shards, n as i64, Duration::from_secs(120)).await?;
    let mut took = Vec::new();
    for i in 0..n {
        let name = format!("d-{i}");
        cp.kubectl_ok(["delete", "pod", &name, "-n", NS, "--wait=false"]).await?;
        let t = wait_count(&db.pool, shards, (n - i - 1) as i64, Duration::from_secs(60)).await?;
        took.push(t);
    }
    took.sort();
    let pct = |p: f64| took[((took.len() as f64 * p).ceil() as usize).clamp(1, took.len()) - 1];
    let note = format!("{n} pods deleted one at a time; clock starts when `kubectl delete` returns");
    report.add(
        S,
        "highwater-operator",
        "pod deletion → shard removal p50",
        format!("{} ms", pct(0.5).as_millis()),
        &note,
    );
    report.add(
        S,
        "highwater-operator",
        "pod deletion → shard removal p99",
        format!("{} ms", pct(0.99).as_millis()),
        format!("{note}; goal ≤ 2 s"),
    );
    report.add(
        S,
        "highwater-operator",
        "pod deletion → shard removal max",
        format!("{} ms", took[took.len() - 1].as_millis()),
        &note,
    );

    // Reconcile throughput.
    let m = sizes.operator_consumers;
    let many: String = (0..m).map(|i| consumer(&format!("c-{i}"), "other", "Shared")).collect();
    let started = Instant::now();
    apply(&cp, tmp.path(), "many.yaml", &many).await?;
    let applied = started.elapsed();
    let rows = "SELECT count(*) FROM highwater.consumers WHERE name LIKE 'c-%'";
    wait_count(&db.pool, rows, m as i64, Duration::from_secs(600)).await?;
    let all = started.elapsed();
    report.add(
        S,
        "highwater-operator",
        "EventConsumers reconciled into rows per second",
        per_s(m as f64 / all.as_secs_f64()),
        format!(
            "{m} resources; kubectl apply alone took {:.1} s of the {:.1} s",
            applied.as_secs_f64(),
            all.as_secs_f64()
        ),
    );
    Ok(())
}
