//! `EventType` resources against a real kube-apiserver and PostgreSQL: versions applied to the
//! registry, a refused version reported (condition, Warning event) with the registry unchanged,
//! stored events counted per version in the status and the `kubectl get et` columns, the CEL
//! rules enforced by the API server, two resources declaring one type, and a deleted resource
//! leaving the registry as it is.
mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use sqlx::PgPool;

fn resource(versions: &str) -> String {
    format!(
        r#"
apiVersion: highwater.dev/v1alpha1
kind: EventType
metadata: {{name: order-placed, namespace: shop}}
spec:
  eventType: OrderPlaced
  description: An order was placed.
  compatibility: Backward
  versions:
{versions}"#
    )
}

const V1: &str = r#"
  - version: 1
    schema:
      type: object
      required: [id]
      properties:
        id: {type: string}
"#;

/// Backward compatible: an optional field.
const V2: &str = r#"
  - version: 2
    schema:
      type: object
      required: [id]
      properties:
        id: {type: string}
        note: {type: string}
"#;

/// Not backward compatible with v2: a new required field, which v2's events lack.
const V3: &str = r#"
  - version: 3
    schema:
      type: object
      required: [id, total]
      properties:
        id: {type: string}
        note: {type: string}
        total: {type: number}
"#;

/// The registry's versions of `event_type` with their schemas.
async fn registry(pool: &PgPool, event_type: &str) -> Vec<(i32, Option<Value>)> {
    sqlx::query_as::<_, (i32, Option<sqlx::types::Json<Value>>)>(
        "SELECT version, json_schema FROM highwater.event_type_versions WHERE event_type = $1 ORDER BY version",
    )
    .bind(event_type)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(v, s)| (v, s.map(|j| j.0)))
    .collect()
}

async fn append(pool: &PgPool, event_type: &str, n: usize) {
    for i in 0..n {
        let _: i64 = sqlx::query_scalar("SELECT highwater.append('order', $1, $2, $3)")
            .bind(format!("o-{event_type}-{i}-{}", rand::random::<u32>()))
            .bind(event_type)
            .bind(sqlx::types::Json(serde_json::json!({"id": format!("{i}")})))
            .fetch_one(pool)
            .await
            .unwrap();
    }
}

async fn status(w: &World, name: &str) -> Value {
    let out = w.cp.kubectl_ok(["get", "et", name, "-n", "shop", "-o", "json"]).await.unwrap_or_default();
    serde_json::from_str::<Value>(&out).map(|v| v["status"].clone()).unwrap_or(Value::Null)
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == type_)).unwrap_or(&Value::Null)
}

async fn wait_status(w: &World, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    eventually(what, Duration::from_secs(60), || async { ok(&status(w, name).await) }).await;
    status(w, name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_types_are_reconciled_into_the_registry() {
    let w = world(&[]).await;
    let op = Operator::start_at(
        &w.cp,
        &w.url,
        w.logs.path(),
        "op-types",
        &["--leader-election", "false", "--event-type-interval", "1s"],
    );

    // v1: registered, Ready, latest 1.
    let out = apply(&w, &resource(V1)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = wait_status(&w, "order-placed", "v1 registered", |s| {
        s["latestVersion"] == 1 && condition(s, "Ready")["status"] == "True"
    })
    .await;
    assert_eq!(condition(&s, "Refused")["status"], "False", "{s}");
    assert_eq!(registry(&w.pool, "OrderPlaced").await.iter().map(|v| v.0).collect::<Vec<_>>(), vec![1]);
    append(&w.pool, "OrderPlaced", 3).await;

    // v2, compatible: both versions registered, latest 2.
    let out = apply(&w, &resource(&[V1, V2].concat())).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_status(&w, "order-placed", "v2 registered", |s| s["latestVersion"] == 2).await;
    let before = registry(&w.pool, "OrderPlaced").await;
    assert_eq!(before.iter().map(|v| v.0).collect::<Vec<_>>(), vec![1, 2]);
    assert!(before[1].1.as_ref().unwrap()["properties"]["note"].is_object(), "{before:?}");
    append(&w.pool, "OrderPlaced", 2).await;

    // Events counted per version, shown by kubectl.
    let s = wait_status(&w, "order-placed", "events per version", |s| s["totalEvents"] == 5).await;
    assert_eq!(s["versions"], serde_json::json!([{"version": 1, "events": 3}, {"version": 2, "events": 2}]), "{s}");
    assert_eq!(s["eventsByVersion"], "v1=3 v2=2");
    let table = w.cp.kubectl_ok(["get", "et", "-n", "shop"]).await.unwrap();
    println!("{table}");
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "TYPE", "LATEST", "EVENTS", "BY", "VERSION", "READY", "AGE"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..7], ["order-placed", "OrderPlaced", "2", "5", "v1=3", "v2=2", "True"], "{table}");

    // v3, incompatible: refused, Warning event, registry unchanged, latest still 2.
    let out = apply(&w, &resource(&[V1, V2, V3].concat())).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = wait_status(&w, "order-placed", "v3 refused", |s| condition(s, "Refused")["status"] == "True").await;
    let refused = condition(&s, "Refused");
    println!("refused: {}", refused["message"]);
    assert_eq!(refused["reason"], "VersionRefused", "{s}");
    assert!(refused["message"].as_str().unwrap().contains('3'), "the message names the version: {s}");
    assert_eq!(condition(&s, "Ready")["status"], "False", "{s}");
    assert_eq!(s["latestVersion"], 2, "{s}");
    assert_eq!(registry(&w.pool, "OrderPlaced").await, before, "the registry is unchanged");
    eventually("a VersionRefused Warning event", Duration::from_secs(30), || async {
        let out =
            w.cp.kubectl_ok([
                "get",
                "events",
                "-n",
                "shop",
                "--field-selector",
                "reason=VersionRefused,type=Warning",
                "-o",
                "name",
            ])
            .await
            .unwrap_or_default();
        out.lines().count() >= 1
    })
    .await;

    // Taking v3 back out of the spec: Ready again, the refusal cleared.
    let out = apply(&w, &resource(&[V1, V2].concat())).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_status(&w, "order-placed", "ready again", |s| {
        condition(s, "Ready")["status"] == "True" && condition(s, "Refused")["status"] == "False"
    })
    .await;

    // v3 again, with an upcast that gives the stored events the total it requires, and a former
    // name: registered, the alias recorded, stored events read through the upcast.
    let v3_upcast = V3.replace("  - version: 3\n", "  - version: 3\n    upcast: \"payload || '{\\\"total\\\": 0}'\"\n");
    let renamed = resource(&[V1, V2, &v3_upcast].concat())
        .replace("  compatibility: Backward\n", "  compatibility: Backward\n  aliases: [OrderCreated]\n");
    let out = apply(&w, &renamed).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_status(&w, "order-placed", "v3 with its upcast", |s| {
        s["latestVersion"] == 3 && condition(s, "Ready")["status"] == "True"
    })
    .await;
    let alias: String =
        sqlx::query_scalar("SELECT event_type FROM highwater.event_type_aliases WHERE alias = 'OrderCreated'")
            .fetch_one(&w.pool)
            .await
            .unwrap();
    assert_eq!(alias, "OrderPlaced");
    let read: Vec<Value> = sqlx::query_scalar(
        "SELECT highwater.upcast_for(event_type, schema_version, payload, '{\"*\": \"latest\"}')
           FROM highwater.events WHERE event_type = 'OrderPlaced' ORDER BY id",
    )
    .fetch_all(&w.pool)
    .await
    .unwrap();
    assert_eq!(read.len(), 5);
    assert!(read.iter().all(|p| p["total"] == 0 && p["id"].is_string()), "every stored event upcast to v3: {read:?}");
    let before = registry(&w.pool, "OrderPlaced").await;

    // The API server refuses what the CEL rules and the schema forbid.
    for (yaml, needle) in [
        (resource(&[V1, V3].concat()), "none skipped"),
        (resource(&V1.replace("    schema:", "    upcast: payload\n    schema:")), "version 1 has no upcast"),
        (resource(V1).replace("eventType: OrderPlaced", "eventType: OrderCreated"), "eventType is immutable"),
        (resource(V1).replace("eventType: OrderPlaced", "eventType: 1bad"), "spec.eventType"),
    ] {
        let out = apply(&w, &yaml).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "expected a refusal naming {needle:?}: {err}");
    }

    // A second resource declaring the same type is not applied and says who owns it.
    let dup = resource(V1).replace("name: order-placed, namespace: shop", "name: dup, namespace: shop");
    let out = apply(&w, &dup).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s =
        wait_status(&w, "dup", "the duplicate in conflict", |s| condition(s, "Ready")["reason"] == "Conflict").await;
    assert!(condition(&s, "Ready")["message"].as_str().unwrap().contains("shop/order-placed"), "{s}");

    // Deleting the resources leaves the registry as it is: stored events name the type.
    w.cp.kubectl_ok(["delete", "et", "order-placed", "dup", "-n", "shop", "--wait=true"]).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(registry(&w.pool, "OrderPlaced").await, before);
    let log = op.log();
    assert!(!log.contains("panicked"), "{log}");
}
