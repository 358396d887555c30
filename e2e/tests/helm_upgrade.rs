//! `helm upgrade` from the previous release's chart and image to this one's, on the real node,
//! while application writers append: the upgrade a platform team does. The previous release
//! (e2e/upgrade/releases; HIGHWATER_UPGRADE_FROM names another) is installed with its own chart
//! (charts/highwater at its commit) and its own image (its `highwater` and `highwater-operator`,
//! built from this repository's history and cached, in this Dockerfile); two of its dispatchers
//! deliver a Shared SQL projection and a PerInstance log consumer declared as EventConsumers.
//! Then `helm upgrade --wait` to this chart and image: the pre-upgrade hook Job runs this
//! release's `highwater migrate` while the old pods keep delivering, and the Deployments replace
//! the operator and the dispatchers. Afterwards: no application transaction failed, every event
//! is in the projection exactly once, every append's wait was bounded, the schema is this
//! release's, and the new operator gave each new dispatcher pod its shard.
//!
//! Needs root, `highwater` and `highwater-operator` built in the target directory (`cargo test
//! --workspace` builds them) and the previous release's build (`e2e/upgrade/build-release.sh
//! --operator --previous`; `.ci/run` runs it first, the test builds it itself when not cached).
use std::{
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use highwater::{
    db,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    migrate::window,
};
use highwater_e2e::{
    ControlPlane,
    chaos::audit,
    controller_manager, helm, image,
    pod_runner::built_programs,
    real_node::{self, RealNode},
    upgrade::{self, writers},
    wait_for,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const NS: &str = "hw";
const OPERATOR: &str = "app.kubernetes.io/component=operator";
const DISPATCHERS: &str = "highwater.dev/group=default";

const CONSUMERS: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: projection, namespace: hw}
spec:
  delivery: Shared
  group: default
  batchSize: 50
  sink: {sql: {statement: 'INSERT INTO projected (event_id) VALUES ($2)'}}
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: live, namespace: hw}
spec:
  delivery: PerInstance
  group: default
  sink: {log: {target: stderr}}
"#;

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// `helm install|upgrade hw <chart>` with `image` and the values both releases share; on failure,
/// what `node` is doing.
async fn helm(cp: &ControlPlane, node: &RealNode, verb: &str, chart: &std::path::Path, image: &str) -> Duration {
    let (repository, tag) = image.rsplit_once(':').unwrap();
    let started = Instant::now();
    helm::run(
        cp.kubeconfig_path(),
        [
            verb,
            "hw",
            chart.to_str().unwrap(),
            "--namespace",
            NS,
            "--wait",
            "--timeout",
            "10m",
            "--set",
            &format!("image.repository={repository}"),
            "--set",
            &format!("image.tag={tag}"),
            "--set",
            "image.pullPolicy=Never",
            "--set",
            "database.existingSecret=hw-db",
            "--set",
            "dispatchers.groups[0].name=default",
            "--set",
            "dispatchers.groups[0].replicas=2",
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n--- the node ---\n{}", node.explain()));
    started.elapsed()
}

/// The images the pods matching `selector` run (not being deleted), sorted.
async fn images(client: &kube::Client, selector: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = pods.list(&kube::api::ListParams::default().labels(selector)).await.unwrap();
    let mut out: Vec<String> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter().filter_map(|c| c.image.clone())))
        .collect();
    out.sort();
    out
}

/// Waits until consumer `live` has one shard per live dispatcher pod (names and uids), `n` of
/// them, all running `image`.
async fn wait_for_pod_shards(client: &kube::Client, pool: &PgPool, n: usize, image: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    wait_for(&format!("{n} dispatcher pods of {image} and their shards"), Duration::from_secs(90), || async {
        let list = pods.list(&kube::api::ListParams::default().labels(DISPATCHERS)).await.map_err(|e| e.to_string())?;
        let mut live: Vec<(String, String)> = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.containers[0].image.as_deref() == Some(image)))
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p.metadata.uid.clone().unwrap_or_default()))
            .collect();
        live.sort();
        let shards: Vec<(String, String)> = sqlx::query_as(
            "SELECT instance_id, coalesce(pod_uid, '') FROM highwater.consumer_shards WHERE consumer = 'live' \
             ORDER BY instance_id",
        )
        .fetch_all(pool)
        .await
        .map_err(|e| e.to_string())?;
        Ok::<_, String>((live.len() == n && shards == live).then_some(()))
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_upgrade_from_the_previous_release_under_load_fails_no_application_transaction() {
    let previous = upgrade::release_from_env(|r| r.into_iter().last()).unwrap();
    let old_programs = upgrade::release_programs(&previous).unwrap();
    let work = tempfile::tempdir().unwrap();
    let old_chart = upgrade::release_chart(&previous, work.path()).unwrap();

    let controllers = controller_manager::DEFAULT_CONTROLLERS.iter().chain(real_node::CONTROLLERS.iter());
    let cp = ControlPlane::builder().controllers(controllers.copied()).scheduler().start().await.unwrap();
    let mut node = RealNode::start(&cp, &built_programs()).await.expect("the real node");
    let new_image = node.image.name.clone();
    let old_image = node.load_image(&old_programs, &image::release_repository(&previous.commit)).await.unwrap();
    println!(
        "release {} image {} (built: {}, {:.1?})",
        previous.name, old_image.name, old_image.built, old_image.build_time
    );
    let client = cp.client();

    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("postgres");
    let pool = db::connect(&pg.url(), 12).await.unwrap();
    let for_pods = node.expose(format!("127.0.0.1:{}", pg.port()).parse().unwrap()).await.unwrap();
    cp.kubectl_ok(["create", "namespace", NS]).await.unwrap();
    cp.kubectl_ok(["label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted"]).await.unwrap();
    let url = format!("postgres://postgres@{for_pods}/postgres");
    cp.kubectl_ok(["create", "secret", "generic", "hw-db", "-n", NS, &format!("--from-literal=url={url}")])
        .await
        .unwrap();

    // Installed with the previous release, as its README said: its hook Job applies its schema.
    let took = helm(&cp, &node, "install", &old_chart, &old_image.name).await;
    println!("helm install of release {}: {took:.1?}", previous.name);
    let registered = Command::new(old_programs.join("highwater"))
        .args(["event-types", "register", writers::EVENT_TYPE])
        .env("DATABASE_URL", pg.url())
        .output()
        .unwrap();
    assert!(registered.status.success(), "{}", String::from_utf8_lossy(&registered.stderr));
    writers::prepare(&pool).await.unwrap();
    sqlx::raw_sql("CREATE TABLE projected (event_id bigint NOT NULL)").execute(&pool).await.unwrap();
    cp.kubectl_ok(["wait", "--for", "condition=established", "crd/eventconsumers.highwater.dev", "--timeout=60s"])
        .await
        .unwrap();
    let out = cp.kubectl_with_input(["apply", "-f", "-"], CONSUMERS).await.unwrap();
    assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    wait_for_pod_shards(&client, &pool, 2, &old_image.name).await;

    let stop = CancellationToken::new();
    let record = Arc::new(Mutex::new(writers::Record::default()));
    let load = writers::start(pool.clone(), 4, stop.clone(), record.clone());
    wait_for("the old dispatchers to deliver", Duration::from_secs(60), || async {
        Ok::<_, String>((count(&pool, "SELECT count(*) FROM projected").await > 0).then_some(()))
    })
    .await
    .unwrap();

    // The upgrade, as a user runs it: the hook migrates while the old pods deliver, then the
    // rolling update; helm returns once every pod of this release is Ready.
    let upgrade_from = Instant::now();
    let took = helm(&cp, &node, "upgrade", &helm::chart_dir(), &new_image).await;
    let upgrade_to = Instant::now();
    println!("helm upgrade {} → this release under load: {took:.1?}", previous.name);
    assert_eq!(images(&client, OPERATOR).await, vec![new_image.clone()], "the operator runs this release");
    wait_for_pod_shards(&client, &pool, 2, &new_image).await;
    assert_eq!(images(&client, DISPATCHERS).await, vec![new_image.clone(); 2], "only this release's dispatchers");
    let (version, oldest): (i32, i32) =
        sqlx::query_as("SELECT version, oldest_binary FROM highwater.schema_version").fetch_one(&pool).await.unwrap();
    assert_eq!((version, oldest), (window::SCHEMA_VERSION, window::OLDEST_BINARY), "the hook migrated");

    // The new pods write on for a while, then the backlog drains into the projection.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();
    load.join_all().await;
    let ended = Instant::now();
    let events = count(&pool, "SELECT count(*) FROM highwater.events").await;
    wait_for("the projection to hold every event", Duration::from_secs(90), || async {
        Ok::<_, String>((count(&pool, "SELECT count(DISTINCT event_id) FROM projected").await >= events).then_some(()))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let committed = sqlx::query_scalar("SELECT id FROM highwater.events").fetch_all(&pool).await.unwrap();
    let sql = audit::sql_sink(&pool, "projection", "projected", &committed.into_iter().collect()).await.unwrap();

    let r = std::mem::take(&mut *record.lock().unwrap());
    let longest_during = r.longest_append(upgrade_from, upgrade_to);
    let longest_after = r.longest_append(upgrade_to, ended);
    println!(
        "{} transactions committed ({events} events), {} failed; longest append during the upgrade \
         {longest_during:?}, after {longest_after:?}; projection lost {} duplicates {}",
        r.committed,
        r.failures.len(),
        sql.lost,
        sql.duplicates
    );
    assert!(
        r.failures.is_empty(),
        "application transactions failed: {:?}",
        r.failures.iter().map(|f| &f.1).collect::<Vec<_>>()
    );
    assert!(r.committed > 100, "the writers kept writing: {}", r.committed);
    assert_eq!((sql.lost, sql.duplicates, sql.phantom), (0, 0, 0), "the projection: exactly once");
    // An append waits at most migrate's lock timeout (500 ms) for the migration to take its locks,
    // then while the migration holds them (a few hundred ms on this schema): never seconds.
    assert!(longest_during < Duration::from_secs(3), "an append waited {longest_during:?} during the upgrade");
    node.stop().await.expect("stopping the node");
}
