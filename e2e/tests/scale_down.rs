//! The scale-down acceptance test on a real control plane: `helm install` of charts/highwater
//! (operator + a dispatcher group of 3), kwok's fake node runs the Pods and the pod runner runs
//! them as real `highwater-operator` and `highwater dispatch` processes against an embedded
//! PostgreSQL. A PerInstance EventConsumer gets one shard per dispatcher pod; `kubectl scale`
//! down removes the removed pods' shards within seconds, and `highwater events prune`, refused
//! while stale shards remain (scale-down with the operator stopped), succeeds once the operator
//! has cleaned them up.
//!
//! Needs `highwater` and `highwater-operator` built in the target directory (`cargo test
//! --workspace` builds them; alone: `cargo build --bins -p highwater -p highwater-operator`).
use std::time::{Duration, Instant};

use highwater::{
    db,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    event_types,
    events::{self, NewEvent},
};
use highwater_e2e::{ControlPlane, PodRunner, helm, wait_for};
use sqlx::PgPool;

const NS: &str = "hw";
const RELEASE: &str = "hw";
const OPERATOR: &str = "hw-highwater-operator";
const DISPATCHERS: &str = "hw-highwater-dispatcher-default";
const STREAM: &str = "order";

const CONSUMER: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: live, namespace: hw}
spec:
  delivery: PerInstance
  group: default
  sink: {log: {target: stderr}}
"#;

/// (instance_id, pod_uid, cursor_id) of consumer `live`'s shards.
async fn shards(pool: &PgPool) -> Vec<(String, Option<String>, i64)> {
    sqlx::query_as(
        "SELECT instance_id, pod_uid, cursor_id FROM highwater.consumer_shards WHERE consumer = 'live' \
         ORDER BY instance_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn append(pool: &PgPool, n: usize) -> i64 {
    let mut last = 0;
    for i in 0..n {
        let mut conn = pool.acquire().await.unwrap();
        let e = NewEvent::new(STREAM, &format!("o-{i}"), "order.placed", serde_json::json!({"n": i}));
        last = events::append(&mut conn, &e).await.unwrap();
    }
    last
}

async fn stored_events(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM highwater.events WHERE stream_type = $1")
        .bind(STREAM)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `highwater events prune --older-than 0 --stream-type order`: (success, stdout + stderr).
async fn prune(url: &str) -> (bool, String) {
    let out = tokio::process::Command::new(highwater_e2e::pod_runner::built_programs().join("highwater"))
        .args(["events", "prune", "--older-than", "0", "--stream-type", STREAM])
        .env("DATABASE_URL", url)
        .output()
        .await
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// name -> uid of the dispatcher pods that exist (deleted or not).
async fn dispatcher_pods(cp: &ControlPlane) -> Vec<(String, String)> {
    let out = cp
        .kubectl_ok([
            "get",
            "pods",
            "-n",
            NS,
            "-l",
            "highwater.dev/group=default",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.uid}{\"\\n\"}{end}",
        ])
        .await
        .unwrap();
    let mut pods: Vec<(String, String)> =
        out.lines().filter_map(|l| l.split_once(' ').map(|(n, u)| (n.to_owned(), u.to_owned()))).collect();
    pods.sort();
    pods
}

fn alive(runner: &PodRunner, prefix: &str) -> Vec<String> {
    runner.alive(NS).into_iter().filter(|p| p.starts_with(&format!("{prefix}-"))).collect()
}

async fn scale(cp: &ControlPlane, deployment: &str, replicas: u32) {
    cp.kubectl_ok(["scale", "deployment", deployment, "-n", NS, &format!("--replicas={replicas}")]).await.unwrap();
}

/// Waits until `n` dispatcher processes run and consumer `live` has exactly one shard per
/// dispatcher pod, each with its pod's uid; returns the pods.
async fn wait_for_pod_shards(cp: &ControlPlane, runner: &PodRunner, pool: &PgPool, n: usize) -> Vec<(String, String)> {
    wait_for(&format!("{n} dispatcher processes and their {n} shards"), Duration::from_secs(90), || async {
        let pods = dispatcher_pods(cp).await;
        let running = alive(runner, DISPATCHERS);
        let shards: Vec<(String, String)> =
            shards(pool).await.into_iter().map(|(i, u, _)| (i, u.unwrap_or_default())).collect();
        let ok = pods.len() == n && running.len() == n && shards == pods;
        Ok::<_, String>(ok.then_some(pods))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(runner)))
}

/// Waits until every shard's cursor reached event `last`, and each pod's dispatcher process has
/// written that event to its log sink (stderr).
async fn wait_delivered(runner: &PodRunner, pool: &PgPool, instances: &[String], last: i64) {
    let key = format!("\"idempotency_key\":\"live:{last}\"");
    wait_for(&format!("{instances:?} to deliver up to event {last}"), Duration::from_secs(60), || async {
        let shards = shards(pool).await;
        let ok = instances
            .iter()
            .all(|i| shards.iter().any(|(s, _, cursor)| s == i && *cursor >= last) && runner.log(NS, i).contains(&key));
        Ok::<_, String>(ok.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(runner)))
}

async fn cluster_state(cp: &ControlPlane) -> String {
    let pods = cp.kubectl(["get", "deploy,rs,pods", "-A", "-o", "wide"]).await.map(|o| o.stdout).unwrap_or_default();
    let events = cp.kubectl(["get", "events", "-A"]).await.map(|o| o.stdout).unwrap_or_default();
    format!("{}\n{}", String::from_utf8_lossy(&pods), String::from_utf8_lossy(&events))
}

fn diagnostics(runner: &PodRunner) -> String {
    let mut text = format!("pod logs in {}\n", runner.logs_dir().display());
    for pod in runner.alive(NS) {
        let log = runner.log(NS, &pod);
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        text += &format!("--- {pod} (last lines) ---\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_installed_release_scales_down_and_the_operator_removes_the_shards() {
    let programs = highwater_e2e::pod_runner::built_programs();
    let cp = ControlPlane::builder().controller_manager().kwok().start().await.expect("control plane");
    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("postgres");
    let url = pg.url();
    let pool = db::connect(&url, 5).await.unwrap();
    // migrations.owner=none: the schema is applied here, before the install.
    db::migrate(&pool).await.unwrap();
    event_types::register(&pool, "order.placed", None, None).await.unwrap();
    let runner = PodRunner::start(&cp, &programs, &cp.dir().join("pods")).unwrap();

    cp.kubectl_ok(["create", "namespace", NS]).await.unwrap();
    // The API server enforces the restricted Pod Security Standard here: every pod of the chart
    // must be admitted under it, or the Deployments get no pods and the test times out.
    cp.kubectl_ok(["label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted"]).await.unwrap();
    let refused = cp.kubectl(["run", "unconfined", "--image=busybox", "-n", NS]).await.unwrap();
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && why.contains("violates PodSecurity"), "restricted is enforced: {why}");
    cp.kubectl_ok(["create", "secret", "generic", "hw-db", "-n", NS, &format!("--from-literal=url={url}")])
        .await
        .unwrap();
    let chart = helm::chart_dir();
    helm::run(
        cp.kubeconfig_path(),
        [
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NS,
            "--set",
            "database.existingSecret=hw-db",
            "--set",
            "migrations.owner=none",
            "--set",
            "dispatchers.groups[0].name=default",
            "--set",
            "dispatchers.groups[0].replicas=3",
        ],
    )
    .await
    .unwrap();

    // The operator and the three dispatchers run as real processes.
    if let Err(e) = wait_for("the operator process", Duration::from_secs(90), || async {
        Ok::<_, String>((alive(&runner, OPERATOR).len() == 1).then_some(()))
    })
    .await
    {
        panic!("{e}\n{}\n{}", diagnostics(&runner), cluster_state(&cp).await);
    }
    cp.kubectl_ok(["wait", "--for", "condition=established", "crd/eventconsumers.highwater.dev", "--timeout=60s"])
        .await
        .unwrap();
    let out = cp.kubectl_with_input(["apply", "-f", "-"], CONSUMER).await.unwrap();
    assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));

    let pods = wait_for_pod_shards(&cp, &runner, &pool, 3).await;
    let names: Vec<String> = pods.iter().map(|p| p.0.clone()).collect();
    let last = append(&pool, 5).await;
    wait_delivered(&runner, &pool, &names, last).await;

    // Scale-down with the operator running: the removed pods' shards go within seconds.
    scale(&cp, DISPATCHERS, 1).await;
    let started = Instant::now();
    let left = wait_for_pod_shards(&cp, &runner, &pool, 1).await;
    let took = started.elapsed();
    println!("scale-down 3 -> 1 to the removed pods' shards gone (operator running): {took:?}");
    assert!(took < Duration::from_secs(10), "shard removal took {took:?}");
    assert!(names.contains(&left[0].0), "the surviving shard is one of the original pods'");
    let (ok, text) = prune(&url).await;
    assert!(ok, "prune after the operator's cleanup: {text}");
    assert_eq!(stored_events(&pool).await, 0, "{text}");

    // Scale-down with the operator stopped: the stale shards block prune until it is back.
    scale(&cp, DISPATCHERS, 3).await;
    let pods = wait_for_pod_shards(&cp, &runner, &pool, 3).await;
    let names: Vec<String> = pods.iter().map(|p| p.0.clone()).collect();
    let last = append(&pool, 5).await;
    wait_delivered(&runner, &pool, &names, last).await;
    scale(&cp, OPERATOR, 0).await;
    wait_for("the operator process to exit", Duration::from_secs(60), || async {
        Ok::<_, String>(alive(&runner, OPERATOR).is_empty().then_some(()))
    })
    .await
    .unwrap();
    scale(&cp, DISPATCHERS, 1).await;
    let survivor = wait_for("one dispatcher pod and process", Duration::from_secs(60), || async {
        let pods = dispatcher_pods(&cp).await;
        let running = alive(&runner, DISPATCHERS);
        Ok::<_, String>((pods.len() == 1 && running.len() == 1).then(|| pods[0].0.clone()))
    })
    .await
    .unwrap();
    assert_eq!(shards(&pool).await.len(), 3, "nobody removes the shards while the operator is stopped");
    let last = append(&pool, 5).await;
    wait_delivered(&runner, &pool, std::slice::from_ref(&survivor), last).await;
    let (ok, text) = prune(&url).await;
    assert!(!ok, "prune must be refused while the removed pods' shards lag: {text}");
    assert!(text.contains("refusing to prune"), "{text}");
    assert_eq!(stored_events(&pool).await, 10, "a refused prune deletes nothing");

    scale(&cp, OPERATOR, 1).await;
    let started = Instant::now();
    let left = wait_for_pod_shards(&cp, &runner, &pool, 1).await;
    println!("operator started again to the stale shards gone: {:?}", started.elapsed());
    assert_eq!(left[0].0, survivor);
    let (ok, text) = prune(&url).await;
    assert!(ok, "prune after the operator's cleanup: {text}");
    assert_eq!(stored_events(&pool).await, 0, "{text}");
    drop(runner);
}
