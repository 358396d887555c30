//! Operations through Kubernetes: a poison event degrades the resource with an Event; the skip,
//! restart and rebuild annotations act once per value; `spec.suspend` disables the shards; a batch
//! that cannot commit degrades it too.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, append, dispatch};
use highwater_e2e::jaeger::{Jaeger, parent, tag};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

async fn jsonpath(w: &World, path: &str) -> String {
    w.cp.kubectl_ok(["get", "ec", "poisoned", "-n", "shop", "-o", &format!("jsonpath={path}")])
        .await
        .unwrap_or_default()
}

async fn has_event(w: &World, reason: &str) -> bool {
    let out =
        w.cp.kubectl_ok(["get", "events", "-n", "shop", "--field-selector", &format!("reason={reason}"), "-o", "name"])
            .await
            .unwrap_or_default();
    !out.trim().is_empty()
}

async fn append_n(w: &World, n: i64) -> i64 {
    let mut tx = w.pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({"n": n}))).await.unwrap();
    tx.commit().await.unwrap();
    id
}

/// A dispatcher of the default group, in process: cancel the token and await the task to stop it.
fn dispatcher(w: &World) -> (CancellationToken, JoinHandle<highwater::Result<()>>) {
    let stop = CancellationToken::new();
    let mut cfg = dispatch::DispatchConfig::new("default", "test-dispatcher");
    cfg.poll_interval = Duration::from_millis(20);
    cfg.refresh_interval = Duration::from_secs(1);
    (stop.clone(), tokio::spawn(dispatch::run(w.pool.clone(), cfg, stop)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_and_suspend_operate_the_consumer() {
    let w = world(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (id bigint, x int)").execute(&w.pool).await.unwrap();
    let _op = Operator::start(&w, "op-1", false);
    let ec = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: poisoned, namespace: shop}
spec:
  delivery: Shared
  maxAttempts: 1
  backoff: {initial: 50ms, max: 100ms}
  sink: {sql: {statement: "INSERT INTO seen VALUES ($2, 1 / (($1->>'n')::int))"}}
"#;
    assert!(apply(&w, ec).await.status.success());
    eventually("the consumer row", Duration::from_secs(60), || async {
        jsonpath(&w, "{.status.state}").await == "Ready"
    })
    .await;

    // A dispatcher, in process.
    let (stop, d) = dispatcher(&w);

    append_n(&w, 1).await;
    let poison = append_n(&w, 0).await;
    append_n(&w, 1).await;
    eventually("Degraded", Duration::from_secs(60), || async { jsonpath(&w, "{.status.state}").await == "Degraded" })
        .await;
    assert_eq!(jsonpath(&w, "{.status.conditions[?(@.type==\"Degraded\")].status}").await, "True");
    assert_eq!(jsonpath(&w, "{.status.shards[0].failingEventId}").await, poison.to_string());
    eventually("a ShardDead event", Duration::from_secs(30), || has_event(&w, "ShardDead")).await;

    // Skip names the event it expects: a wrong id is refused and reported.
    w.cp.kubectl_ok(["annotate", "ec", "poisoned", "-n", "shop", "highwater.dev/skip-event=999999"]).await.unwrap();
    eventually("a SkipMismatch event", Duration::from_secs(30), || has_event(&w, "SkipMismatch")).await;
    assert_eq!(jsonpath(&w, "{.status.shards[0].status}").await, "dead");
    w.cp.kubectl_ok([
        "annotate",
        "ec",
        "poisoned",
        "-n",
        "shop",
        "--overwrite",
        &format!("highwater.dev/skip-event={poison}"),
    ])
    .await
    .unwrap();
    eventually("the skip to deliver the next event", Duration::from_secs(30), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM seen").fetch_one(&w.pool).await.unwrap() == 2
    })
    .await;
    assert!(has_event(&w, "Skipped").await);
    eventually("Ready again", Duration::from_secs(30), || async { jsonpath(&w, "{.status.state}").await == "Ready" })
        .await;
    assert_eq!(jsonpath(&w, "{.status.handledSkip}").await, poison.to_string());

    // Restart: once per new value.
    append_n(&w, 0).await;
    eventually("dead again", Duration::from_secs(30), || async {
        jsonpath(&w, "{.status.shards[0].status}").await == "dead"
    })
    .await;
    w.cp.kubectl_ok(["annotate", "ec", "poisoned", "-n", "shop", "highwater.dev/restart=1"]).await.unwrap();
    eventually("a Restarted event", Duration::from_secs(30), || has_event(&w, "Restarted")).await;
    eventually("handledRestart recorded", Duration::from_secs(30), || async {
        jsonpath(&w, "{.status.handledRestart}").await == "1"
    })
    .await;
    // Both annotations are in the audit, by the annotation's field manager.
    let changes = highwater::ops::shard_changes(&w.pool, "poisoned", 10).await.unwrap();
    let audit: Vec<(&str, &str)> = changes.iter().map(|c| (c.action.as_str(), c.changed_by.as_str())).collect();
    assert_eq!(
        audit,
        [("restarted", "kubernetes:kubectl-annotate"), ("skipped", "kubernetes:kubectl-annotate")],
        "{changes:?}"
    );

    // Suspend disables every shard.
    w.cp.kubectl_ok(["patch", "ec", "poisoned", "-n", "shop", "--type=merge", "-p", r#"{"spec":{"suspend":true}}"#])
        .await
        .unwrap();
    eventually("Suspended", Duration::from_secs(30), || async { jsonpath(&w, "{.status.state}").await == "Suspended" })
        .await;
    assert_eq!(shard_statuses(&w.pool, "poisoned").await, ["disabled"]);
    stop.cancel();
    d.await.unwrap().unwrap();
}

/// A batch that fails at COMMIT (a deferred constraint two events of one transaction violate
/// together) is the failure of the event that breaks it: the events before it apply, it counts its
/// attempts and the resource is Degraded naming the shard, the event and PostgreSQL's message
/// (before issue 44 no event was blamed: the shard stayed idle with no attempt counted); Ready
/// again once the cause is mended and the event applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_fails_at_commit_blames_its_event_until_mended() {
    let w = world(&["Tick"]).await;
    sqlx::raw_sql(
        "CREATE TABLE seen (id bigint PRIMARY KEY, n int NOT NULL,
                            CONSTRAINT n_once UNIQUE (n) DEFERRABLE INITIALLY DEFERRED)",
    )
    .execute(&w.pool)
    .await
    .unwrap();
    let _op = Operator::start(&w, "op-1", false);
    // Attempts enough that the shard still retries when the constraint is dropped.
    let ec = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: poisoned, namespace: shop}
spec:
  delivery: Shared
  maxAttempts: 1000
  sink: {sql: {statement: "INSERT INTO seen VALUES ($2, ($1->>'n')::int)"}}
"#;
    assert!(apply(&w, ec).await.status.success());
    eventually("the consumer row", Duration::from_secs(60), || async {
        jsonpath(&w, "{.status.state}").await == "Ready"
    })
    .await;
    let (stop, d) = dispatcher(&w);

    // One transaction, two events with the same n: each INSERT passes, the COMMIT fails.
    let mut tx = w.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({"n": 7}))).await.unwrap());
    }
    tx.commit().await.unwrap();
    eventually("Degraded", Duration::from_secs(60), || async { jsonpath(&w, "{.status.state}").await == "Degraded" })
        .await;
    let message = jsonpath(&w, "{.status.conditions[?(@.type==\"Degraded\")].message}").await;
    assert!(message.contains(&format!("is retrying event {}", ids[1])), "the second event is blamed: {message}");
    let last_error = jsonpath(&w, "{.status.shards[0].lastError}").await;
    assert!(last_error.contains("at COMMIT") && last_error.contains("n_once"), "{last_error}");
    let attempts: i64 = jsonpath(&w, "{.status.shards[0].attempts}").await.parse().unwrap();
    assert!(attempts >= 1, "the event counts its attempts: {attempts}");
    let applied: Vec<i64> = sqlx::query_scalar("SELECT id FROM seen").fetch_all(&w.pool).await.unwrap();
    assert_eq!(applied, [ids[0]], "the event before it applied, once");

    sqlx::raw_sql("ALTER TABLE seen DROP CONSTRAINT n_once").execute(&w.pool).await.unwrap();
    eventually("Ready again", Duration::from_secs(60), || async { jsonpath(&w, "{.status.state}").await == "Ready" })
        .await;
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM seen").fetch_one(&w.pool).await.unwrap();
    assert_eq!(applied, 2, "both applied once mended");
    stop.cancel();
    d.await.unwrap().unwrap();
}

/// `highwater.dev/rebuild`: resets the read model and replays every event, once per value, with a
/// `Rebuilt` event; with events pruned (and no bootstrap) a `RebuildRefused` Warning instead. The
/// operator exports both runs as spans (service `highwater-operator`) to a real Jaeger, and the
/// rebuild is in the shard-change audit, by the annotation's field manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rebuild_annotation_rebuilds_once_per_value() {
    let w = world(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE totals (n bigint NOT NULL); INSERT INTO totals VALUES (0);")
        .execute(&w.pool)
        .await
        .unwrap();
    let jaeger = Jaeger::start().await.expect("start jaeger");
    let endpoint = jaeger.otlp_endpoint();
    let otel = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "100")];
    let args = ["--leader-election", "false"];
    let _op = Operator::start_with_env(&w.cp, &w.url, w.logs.path(), "op-1", &args, &otel);
    let ec = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: totals, namespace: shop}
spec:
  delivery: Shared
  sink: {sql: {statement: "UPDATE totals SET n = n + 1", reset: "UPDATE totals SET n = 0"}}
"#;
    assert!(apply(&w, ec).await.status.success());
    let total = || async { sqlx::query_scalar::<_, i64>("SELECT n FROM totals").fetch_one(&w.pool).await.unwrap() };
    let pool = w.pool.clone();
    let rebuilds = || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM highwater.consumer_shards WHERE consumer = 'totals' AND rebuild_started_at IS NOT NULL",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let (stop, d) = dispatcher(&w);
    for n in 0..5 {
        append_n(&w, n).await;
    }
    eventually("5 events applied", Duration::from_secs(60), || async { total().await == 5 }).await;
    assert_eq!(rebuilds().await, 0);

    let ec_get = |path: &'static str| {
        let w = &w;
        async move {
            w.cp.kubectl_ok(["get", "ec", "totals", "-n", "shop", "-o", &format!("jsonpath={path}")])
                .await
                .unwrap_or_default()
        }
    };
    w.cp.kubectl_ok(["annotate", "ec", "totals", "-n", "shop", "highwater.dev/rebuild=1"]).await.unwrap();
    eventually("a Rebuilt event", Duration::from_secs(30), || has_event(&w, "Rebuilt")).await;
    eventually("handledRebuild recorded", Duration::from_secs(30), || async {
        ec_get("{.status.handledRebuild}").await == "1"
    })
    .await;
    assert_eq!(rebuilds().await, 1);
    eventually("the replay to apply every event once", Duration::from_secs(60), || async { total().await == 5 }).await;

    // Events pruned: refused, nothing changed.
    sqlx::query("DELETE FROM highwater.events WHERE id = (SELECT min(id) FROM highwater.events)")
        .execute(&w.pool)
        .await
        .unwrap();
    w.cp.kubectl_ok(["annotate", "ec", "totals", "-n", "shop", "--overwrite", "highwater.dev/rebuild=2"])
        .await
        .unwrap();
    eventually("a RebuildRefused event", Duration::from_secs(30), || has_event(&w, "RebuildRefused")).await;
    eventually("handledRebuild 2", Duration::from_secs(30), || async {
        ec_get("{.status.handledRebuild}").await == "2"
    })
    .await;
    assert_eq!(total().await, 5, "nothing changed");
    stop.cancel();
    d.await.unwrap().unwrap();

    let changes = highwater::ops::shard_changes(&w.pool, "totals", 10).await.unwrap();
    let audit: Vec<(&str, &str)> = changes.iter().map(|c| (c.action.as_str(), c.changed_by.as_str())).collect();
    assert_eq!(audit, [("rebuilt", "kubernetes:kubectl-annotate")], "the refused one changed nothing: {changes:?}");
    // Both runs are spans of the operator: the rebuild with its outcome, the refusal as an error.
    let runs = highwater_e2e::wait_for("the operator's two rebuild spans", Duration::from_secs(30), || async {
        let spans = jaeger.spans("highwater-operator", "highwater rebuild").await?;
        anyhow::Ok((spans.len() >= 2).then_some(spans))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", jaeger.log_tail(20)));
    for run in &runs {
        assert_eq!(tag(run, "highwater.operation.by"), Some(&json!("kubernetes:kubectl-annotate")), "{run}");
        assert_eq!(parent(run), None, "an operation is a root span: {run}");
    }
    let outcomes: Vec<&str> =
        runs.iter().filter_map(|r| tag(r, "highwater.operation.outcome").and_then(|v| v.as_str())).collect();
    assert!(outcomes.iter().any(|o| o.contains("\"Replaying\"") && o.contains("\"total\":5")), "{runs:?}");
    assert!(runs.iter().any(|r| tag(r, "error.type") == Some(&json!("operation_failed"))), "{runs:?}");
}

/// Two resources claiming one consumer name are refused, never merged; the owner keeps its rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_claim_on_a_consumer_name_is_refused_in_status() {
    let w = world(&[]).await;
    w.cp.kubectl_ok(["create", "namespace", "other"]).await.unwrap();
    let _op = Operator::start(&w, "op-1", false);
    let owner = "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {name: orders, namespace: shop}\nspec: {delivery: Shared, sink: {log: {}}}\n";
    assert!(apply(&w, owner).await.status.success());
    let state = |ns: &'static str, name: &'static str| {
        let w = &w;
        async move {
            w.cp.kubectl_ok(["get", "ec", name, "-n", ns, "-o", "jsonpath={.status.state}"]).await.unwrap_or_default()
        }
    };
    eventually("the owner to be Ready", Duration::from_secs(60), || async { state("shop", "orders").await == "Ready" })
        .await;
    let claimant = "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {name: copycat, namespace: other}\nspec: {delivery: Shared, consumerName: orders, sink: {sql: {statement: 'SELECT 1'}}}\n";
    assert!(apply(&w, claimant).await.status.success());
    eventually("the claimant to be refused", Duration::from_secs(60), || async {
        state("other", "copycat").await == "Conflict"
    })
    .await;
    let msg =
        w.cp.kubectl_ok([
            "get",
            "ec",
            "copycat",
            "-n",
            "other",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}",
        ])
        .await
        .unwrap();
    assert!(msg.contains("already declared by kubernetes:shop/orders"), "{msg}");
    let (source, sink): (String, serde_json::Value) =
        sqlx::query_as("SELECT source, sink FROM highwater.consumers WHERE name = 'orders'")
            .fetch_one(&w.pool)
            .await
            .unwrap();
    assert_eq!(source, "kubernetes:shop/orders", "the owner keeps the row");
    assert!(sink.get("log").is_some(), "the claimant's spec was not merged in: {sink}");
    assert_eq!(state("shop", "orders").await, "Ready");
    // Deleting the refused claimant leaves the owner's rows alone.
    w.cp.kubectl_ok(["delete", "ec", "copycat", "-n", "other", "--wait=true", "--timeout=60s"]).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.consumer_shards WHERE consumer = 'orders'")
        .fetch_one(&w.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// A change of `partitions` while a partition is dead is refused in the status (`InvalidSpec`,
/// naming the partition and the fix) and changes nothing; once the partition is restarted the
/// same resource goes through and the new split replaces the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_change_while_a_partition_is_dead_is_refused_in_status() {
    let w = world(&[]).await;
    let _op = Operator::start(&w, "op-1", false);
    let ec = |n: u32| {
        format!(
            "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: split, namespace: shop}}\n\
             spec: {{delivery: Shared, partitions: {n}, sink: {{log: {{}}}}}}\n"
        )
    };
    assert!(apply(&w, &ec(2)).await.status.success());
    let get = |path: &'static str| {
        let w = &w;
        async move {
            w.cp.kubectl_ok(["get", "ec", "split", "-n", "shop", "-o", &format!("jsonpath={path}")])
                .await
                .unwrap_or_default()
        }
    };
    eventually("two partitions, Ready", Duration::from_secs(60), || async {
        shards(&w.pool, "split").await.len() == 2 && get("{.status.state}").await == "Ready"
    })
    .await;
    // A poison event left partition 1 dead (as a dispatcher records it after maxAttempts).
    sqlx::query(
        "UPDATE highwater.consumer_shards SET status = 'dead', attempts = 10, failing_event_id = 7,
                last_error = 'boom' WHERE consumer = 'split' AND instance_id = '__shared__/p1of2'",
    )
    .execute(&w.pool)
    .await
    .unwrap();
    assert!(apply(&w, &ec(4)).await.status.success(), "the API server accepts the spec");
    eventually("the change refused in status", Duration::from_secs(60), || async {
        get("{.status.state}").await == "InvalidSpec"
    })
    .await;
    let msg = get("{.status.conditions[?(@.type==\"Ready\")].message}").await;
    assert!(
        msg.contains("partitions cannot change from 2 to 4 while a partition is dead")
            && msg.contains("__shared__/p1of2 (dead at event 7: boom)")
            && msg.contains("highwater consumer restart split --instance"),
        "{msg}"
    );
    let ids: Vec<String> = shards(&w.pool, "split").await.into_iter().map(|(i, _)| i).collect();
    assert_eq!(ids, ["__shared__/p0of2", "__shared__/p1of2"], "nothing changed");
    let n: i32 = sqlx::query_scalar("SELECT partitions FROM highwater.consumers WHERE name = 'split'")
        .fetch_one(&w.pool)
        .await
        .unwrap();
    assert_eq!(n, 2, "the stored definition is the old one");

    // The fix the message names, then the operator's next reconcile applies the change.
    highwater::ops::restart(&w.pool, "split", Some("__shared__/p1of2"), &highwater::ops::Audit::by("test"))
        .await
        .unwrap();
    eventually("the new split in force", Duration::from_secs(90), || async {
        shards(&w.pool, "split").await.len() == 4 && get("{.status.state}").await == "Ready"
    })
    .await;
}

/// `highwater.dev/redrive`: a bad value and a non-dead-letter are refused with a `RedriveRefused`
/// Warning; `<event id>` requests the redrive of a fixed poison event parked by `errorMode: skip`,
/// which a dispatcher then applies exactly once, with a `Redriven` Event, the dead letter marked
/// by the annotation's field manager, and the value recorded in `status.handledRedrive`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redrive_annotation_redrives_a_dead_letter_once_per_value() {
    let w = world(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE fixed (ok boolean); CREATE TABLE seen (id bigint, x int)")
        .execute(&w.pool)
        .await
        .unwrap();
    let _op = Operator::start(&w, "op-1", false);
    let ec = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: poisoned, namespace: shop}
spec:
  delivery: Shared
  errorMode: skip
  maxAttempts: 1
  backoff: {initial: 50ms, max: 100ms}
  sink: {sql: {statement: "INSERT INTO seen SELECT $2, 1 / (($1->>'n')::int + (SELECT count(*) FROM fixed))"}}
"#;
    assert!(apply(&w, ec).await.status.success());
    eventually("Ready", Duration::from_secs(60), || async { jsonpath(&w, "{.status.state}").await == "Ready" }).await;
    let (stop, d) = dispatcher(&w);
    let good = append_n(&w, 1).await;
    let poison = append_n(&w, 0).await;
    eventually("the poison event parked", Duration::from_secs(60), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM highwater.dead_letters").fetch_one(&w.pool).await.unwrap()
            == 1
    })
    .await;
    let annotate = |v: String| {
        let cp = &w.cp;
        async move {
            cp.kubectl_ok([
                "annotate",
                "ec",
                "poisoned",
                "-n",
                "shop",
                "--overwrite",
                &format!("highwater.dev/redrive={v}"),
            ])
            .await
            .unwrap();
        }
    };
    annotate("everything".into()).await;
    eventually("a RedriveRefused event", Duration::from_secs(30), || has_event(&w, "RedriveRefused")).await;
    annotate(good.to_string()).await;
    eventually("handledRedrive recorded", Duration::from_secs(30), || async {
        jsonpath(&w, "{.status.handledRedrive}").await == good.to_string()
    })
    .await;
    assert!(!has_event(&w, "Redriven").await, "an event that is not a dead letter is refused");

    sqlx::query("INSERT INTO fixed VALUES (true)").execute(&w.pool).await.unwrap();
    annotate(poison.to_string()).await;
    eventually("a Redriven event", Duration::from_secs(30), || has_event(&w, "Redriven")).await;
    eventually("the redrive applied", Duration::from_secs(30), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM seen WHERE id = $1")
            .bind(poison)
            .fetch_one(&w.pool)
            .await
            .unwrap()
            == 1
    })
    .await;
    let (by, reason, redriven): (Option<String>, Option<String>, bool) = sqlx::query_as(
        "SELECT redrive_by, redrive_reason, redriven_at IS NOT NULL FROM highwater.dead_letters WHERE event_id = $1",
    )
    .bind(poison)
    .fetch_one(&w.pool)
    .await
    .unwrap();
    assert!(redriven);
    assert_eq!(by.as_deref(), Some("kubernetes:kubectl-annotate"));
    assert_eq!(reason, Some(format!("annotation highwater.dev/redrive={poison} on shop/poisoned")));
    assert_eq!(jsonpath(&w, "{.status.handledRedrive}").await, poison.to_string());
    // Once per value: a later reconcile does not request it again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM seen").fetch_one(&w.pool).await.unwrap();
    assert_eq!(seen, 2, "the good event and the redriven one, once each");
    stop.cancel();
    d.await.unwrap().unwrap();
}
