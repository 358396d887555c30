//! The chart's pods as containers on a real node: a kubelet built from the control plane's
//! Kubernetes version joins it, with containerd and runc from Debian, and runs the image the
//! repository's Dockerfile builds (e2e/src/real_node.rs, docs/image.md). `helm install` into a
//! namespace enforcing the restricted Pod Security Standard: the migration hook Job, the operator
//! (in-cluster configuration, its service-account token) and three dispatchers (probes, read-only
//! root, user 65532, no capabilities) against the test's PostgreSQL; the scale 3 -> 1 scenario of
//! tests/scale_down.rs runs once here with real pods; the web console (`console.enabled`) serves
//! its overview from its pod. A pod whose container cannot start fails with the reason.
//!
//! Needs root, and `highwater` and `highwater-operator` built in the target directory (`cargo
//! test --workspace` builds them; alone: `cargo build --bins -p highwater -p highwater-operator`).
use std::time::{Duration, Instant};

use highwater::{
    db,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    event_types,
    events::{self, NewEvent},
};
use highwater_e2e::{
    ControlPlane,
    containerd::Containerd,
    controller_manager, helm, image, kubelet,
    pod_runner::built_programs,
    real_node::{self, RealNode},
    wait_for,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use sqlx::PgPool;

const NS: &str = "hw";
const OPERATOR: &str = "app.kubernetes.io/component=operator";
const DISPATCHERS: &str = "highwater.dev/group=default";
const DISPATCHER_DEPLOYMENT: &str = "hw-highwater-dispatcher-default";
const CONSOLE: &str = "app.kubernetes.io/component=console";

const CONSUMER: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: live, namespace: hw}
spec:
  delivery: PerInstance
  group: default
  sink: {log: {target: stderr}}
"#;

async fn control_plane() -> ControlPlane {
    let controllers = controller_manager::DEFAULT_CONTROLLERS.iter().chain(real_node::CONTROLLERS.iter());
    ControlPlane::builder().controllers(controllers.copied()).scheduler().start().await.expect("control plane")
}

async fn control_plane_and_node() -> (ControlPlane, RealNode) {
    let cp = control_plane().await;
    let node = RealNode::start(&cp, &built_programs()).await.expect("the real node");
    eprintln!("real node Ready in {:.1?} with image {}", node.startup, node.image.name);
    (cp, node)
}

/// (instance_id, pod_uid, cursor_id) of consumer `live`'s shards.
async fn shards(pool: &PgPool) -> Vec<(String, String, i64)> {
    sqlx::query_as(
        "SELECT instance_id, coalesce(pod_uid, ''), cursor_id FROM highwater.consumer_shards \
         WHERE consumer = 'live' ORDER BY instance_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// (name, uid) of the dispatcher pods not being deleted.
async fn dispatcher_pods(client: &kube::Client) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = pods.list(&kube::api::ListParams::default().labels(DISPATCHERS)).await.unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.uid.unwrap_or_default()))
        .collect();
    out.sort();
    out
}

/// Waits until consumer `live` has exactly one shard per live dispatcher pod (by name and uid),
/// `n` of them.
async fn wait_for_pod_shards(client: &kube::Client, pool: &PgPool, n: usize) -> Vec<(String, String)> {
    wait_for(&format!("{n} dispatcher pods and their {n} shards"), Duration::from_secs(60), || async {
        let pods = dispatcher_pods(client).await;
        let shards: Vec<(String, String)> = shards(pool).await.into_iter().map(|(i, u, _)| (i, u)).collect();
        Ok::<_, String>((pods.len() == n && shards == pods).then_some(pods))
    })
    .await
    .unwrap()
}

/// The OCI runtime spec containerd ran a container with (`ctr containers info`).
fn runtime_spec(node: &RealNode, pod: &Pod) -> serde_json::Value {
    let id = pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .container_id
        .as_deref()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_owned();
    let info: serde_json::Value =
        serde_json::from_str(&node.containerd().ctr(&["containers", "info", &id]).unwrap()).unwrap();
    info["Spec"].clone()
}

/// What the chart's security context must have become in the container that ran.
fn assert_restricted(node: &RealNode, pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap();
    let status = &pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert_eq!(status.image, node.image.name, "{name} runs the image the Dockerfile built");
    let spec = runtime_spec(node, pod);
    assert_eq!(spec["process"]["user"]["uid"], 65532, "{name} runs as 65532: {}", spec["process"]["user"]);
    assert_eq!(spec["root"]["readonly"], true, "{name} has a read-only root");
    assert_eq!(spec["process"]["noNewPrivileges"], true, "{name}: no new privileges");
    let caps = &spec["process"]["capabilities"];
    for set in ["bounding", "effective", "permitted"] {
        assert!(caps[set].as_array().is_none_or(|c| c.is_empty()), "{name} has no {set} capabilities: {caps}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_installed_pods_run_as_containers_and_the_operator_removes_scaled_down_shards() {
    let (cp, mut node) = control_plane_and_node().await;
    let client = cp.client();
    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("postgres");
    let pool = db::connect(&pg.url(), 5).await.unwrap();
    let for_pods = node.expose(format!("127.0.0.1:{}", pg.port()).parse().unwrap()).await.unwrap();
    let url = format!("postgres://postgres@{for_pods}/postgres");

    cp.kubectl_ok(["create", "namespace", NS]).await.unwrap();
    cp.kubectl_ok(["label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted"]).await.unwrap();
    cp.kubectl_ok(["create", "secret", "generic", "hw-db", "-n", NS, &format!("--from-literal=url={url}")])
        .await
        .unwrap();
    let (repository, tag) = node.image.name.rsplit_once(':').unwrap();
    let chart = helm::chart_dir();
    let installed = Instant::now();
    helm::run(
        cp.kubeconfig_path(),
        [
            "install",
            "hw",
            chart.to_str().unwrap(),
            "--namespace",
            NS,
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
            "dispatchers.groups[0].replicas=3",
            "--set",
            "console.enabled=true",
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n--- the node ---\n{}", node.explain()));
    println!("helm install, its migration hook Job included: {:.1?}", installed.elapsed());
    // migrations.owner=hook (the default): helm waited for the migration Job's container.
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater._sqlx_migrations WHERE success")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(applied > 0, "the hook Job applied the schema");
    event_types::register(&pool, "order.placed", None, None).await.unwrap();
    let operator = node.wait_pods_ready(&client, NS, OPERATOR, 1, Duration::from_secs(90)).await.unwrap();
    node.wait_pods_ready(&client, NS, DISPATCHERS, 3, Duration::from_secs(90)).await.unwrap();
    println!("helm install to every pod Ready (1 operator, 3 dispatchers): {:.1?}", installed.elapsed());

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    assert_restricted(&node, &pods.get(&operator[0]).await.unwrap());
    let (dispatchers, _): (Vec<String>, Vec<String>) = dispatcher_pods(&client).await.into_iter().unzip();
    for name in &dispatchers {
        assert_restricted(&node, &pods.get(name).await.unwrap());
    }

    cp.kubectl_ok(["wait", "--for", "condition=established", "crd/eventconsumers.highwater.dev", "--timeout=60s"])
        .await
        .unwrap();
    let out = cp.kubectl_with_input(["apply", "-f", "-"], CONSUMER).await.unwrap();
    assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    let pods3 = wait_for_pod_shards(&client, &pool, 3).await;

    // The console's pod: Ready through its probe, restricted like the others, and serving the
    // overview (read-only: the chart gave it no tokens) with the consumer's shards, over the pod
    // network as its Service would.
    let console = node.wait_pods_ready(&client, NS, CONSOLE, 1, Duration::from_secs(90)).await.unwrap();
    let console = pods.get(&console[0]).await.unwrap();
    assert_restricted(&node, &console);
    let ip = console.status.as_ref().and_then(|s| s.pod_ip.clone()).expect("the console pod's IP");
    let page = reqwest::get(format!("http://{ip}:8090/")).await.unwrap();
    assert_eq!(page.status(), 200, "the console's overview");
    let page = page.text().await.unwrap();
    for (pod, _) in &pods3 {
        assert!(page.contains(pod.as_str()), "the overview lists shard {pod} of consumer live:\n{page}");
    }

    let mut last = 0;
    for i in 0..5 {
        let mut conn = pool.acquire().await.unwrap();
        let e = NewEvent::new("order", &format!("o-{i}"), "order.placed", serde_json::json!({"n": i}));
        last = events::append(&mut conn, &e).await.unwrap();
    }
    let key = format!("\"idempotency_key\":\"live:{last}\"");
    wait_for("every dispatcher container to deliver the last event", Duration::from_secs(60), || async {
        let shards = shards(&pool).await;
        let ok = pods3.iter().all(|(pod, _)| {
            shards.iter().any(|(i, _, cursor)| i == pod && *cursor >= last)
                && node.kubelet().container_log(NS, pod, "dispatcher").contains(&key)
        });
        Ok::<_, String>(ok.then_some(()))
    })
    .await
    .unwrap();

    cp.kubectl_ok(["scale", "deployment", DISPATCHER_DEPLOYMENT, "-n", NS, "--replicas=1"]).await.unwrap();
    let scaled = Instant::now();
    let left = wait_for_pod_shards(&client, &pool, 1).await;
    let took = scaled.elapsed();
    println!("scale-down 3 -> 1 to the removed pods' shards gone, real pods: {took:.1?}");
    assert!(pods3.contains(&left[0]), "the surviving shard is one of the original pods'");
    assert!(took < Duration::from_secs(30), "shard removal took {took:?}");
    // The operator removed them (not the dispatchers on their way out): its event for each pod.
    let removed: Vec<&str> = pods3.iter().filter(|p| **p != left[0]).map(|p| p.0.as_str()).collect();
    let filter = r#"jsonpath={range .items[?(@.reason=="PodShardsRemoved")]}{.related.name}{"\n"}{end}"#;
    wait_for("the operator's PodShardsRemoved event for each deleted pod", Duration::from_secs(30), || async {
        let out =
            cp.kubectl_ok(["get", "events.events.k8s.io", "-n", NS, "-o", filter]).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(removed.iter().all(|pod| out.lines().any(|l| l == *pod)).then_some(()))
    })
    .await
    .unwrap();
    node.wait_pods_ready(&client, NS, DISPATCHERS, 1, Duration::from_secs(60)).await.unwrap();

    node.stop().await.expect("stopping the node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_whose_container_cannot_start_fails_with_the_reason() {
    let (cp, mut node) = control_plane_and_node().await;
    let client = cp.client();
    let pod = |name: &str, image: &str, command: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{case: {name}}}}}\nspec:\n  \
             containers:\n  - {{name: main, image: \"{image}\", imagePullPolicy: Never, command: [\"{command}\"]}}\n"
        )
    };
    let missing = format!("{}:no-such-tag", image::IMAGE);
    for manifest in [pod("no-image", &missing, "highwater"), pod("no-shell", &node.image.name, "sh")] {
        let out = cp.kubectl_with_input(["apply", "-f", "-"], &manifest).await.unwrap();
        assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    }
    let err = node
        .wait_pods_ready(&client, "default", "case=no-image", 1, Duration::from_secs(60))
        .await
        .expect_err("an image the node does not have cannot start");
    let text = format!("{err:#}");
    eprintln!("{text}");
    assert!(text.contains("ErrImageNeverPull") && text.contains("no-such-tag"), "{text}");
    let err = node
        .wait_pods_ready(&client, "default", "case=no-shell", 1, Duration::from_secs(60))
        .await
        .expect_err("a command the image lacks cannot start");
    let text = format!("{err:#}");
    eprintln!("{text}");
    assert!(text.contains("\"sh\"") && text.contains("not found"), "{text}");
    node.stop().await.expect("stopping the node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kubelet_that_cannot_join_fails_with_the_reason() {
    let cp = control_plane().await;
    // The node's user name without the system:nodes group: nothing authorizes it to register.
    let identity = cp.user(&format!("system:node:{}", kubelet::NODE), &[]).await.unwrap();
    let err = match RealNode::start_as(&cp, &built_programs(), &identity, Duration::from_secs(10)).await {
        Ok(_) => panic!("a kubelet without the system:nodes group joined"),
        Err(e) => format!("{e:#}"),
    };
    eprintln!("{err}");
    assert!(err.contains("joining the kubelet") && err.contains("forbidden"), "{err}");
}

#[tokio::test]
async fn a_missing_containerd_fails_instead_of_skipping() {
    let dir = tempfile::tempdir().unwrap();
    let missing = std::path::Path::new("/nonexistent/containerd");
    let err = match Containerd::start_with(missing, missing, dir.path(), "pause", &dir.path().join("log")).await {
        Ok(_) => panic!("containerd started from {}", missing.display()),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("/nonexistent/containerd") && err.contains("apt-get install containerd"), "{err}");
}
