//! `highwater events read --stream TYPE/ID` (issue 36, part 3): a stream's events in delivery
//! order, which for a versioned stream is version order even when a transaction that took its id
//! first appended the later version; `--to-version` and `--as-of` cut it; bad input is refused
//! with a fix.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, append};
use serde_json::{Value, json};

fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read_json(url: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["events", "read", "-o", "json"];
    all.extend_from_slice(args);
    let (code, out, err) = cli(url, &all);
    assert_eq!(code, 0, "{all:?}: {out}{err}");
    serde_json::from_str::<Value>(&out).unwrap().as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reads_in_version_order_and_cuts_at_a_version_or_a_time() {
    let db = setup(&["OrderPlaced", "OrderPaid", "OrderShipped"]).await;
    let versioned = |t: &str, v: i64, n: i64| {
        let mut e = NewEvent::new("order", "o/42", t, json!({"n": n}));
        e.expected_version = Some(v);
        e.tenant_id = Some("t1".into());
        e
    };
    // Transaction A takes its transaction id first; B appends version 1 and commits; A appends
    // version 2 and commits: by raw transaction ids version 2 would come first.
    let mut a = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()").execute(&mut *a).await.unwrap();
    let mut b = db.pool.begin().await.unwrap();
    let v1 = append(&mut b, &versioned("OrderPlaced", 0, 1)).await.unwrap();
    b.commit().await.unwrap();
    let v2 = append(&mut a, &versioned("OrderPaid", 1, 2)).await.unwrap();
    a.commit().await.unwrap();
    // Another stream in between, and a later version after a pause.
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("order", "o/43", "OrderPlaced", json!({"n": 99}))).await.unwrap();
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let between: String =
        sqlx::query_scalar("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut tx = db.pool.begin().await.unwrap();
    let v3 = append(&mut tx, &versioned("OrderShipped", 2, 3)).await.unwrap();
    tx.commit().await.unwrap();

    // The stream id holds a '/': the split is at the first one.
    let all = read_json(&db.url, &["--stream", "order/o/42"]);
    let ids: Vec<i64> = all.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    let versions: Vec<i64> = all.iter().map(|e| e["stream_version"].as_i64().unwrap()).collect();
    assert_eq!(ids, [v1, v2, v3]);
    assert_eq!(versions, [1, 2, 3], "version order, although version 2's transaction took its id first");
    assert_eq!(all[1]["event_type"], "OrderPaid");
    assert_eq!(all[1]["tenant_id"], "t1");
    assert_eq!(all[1]["payload"], json!({"n": 2}));
    assert!(all[1]["metadata"]["correlation_id"].is_string());

    let upto: Vec<i64> = read_json(&db.url, &["--stream", "order/o/42", "--to-version", "2"])
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(upto, [v1, v2]);
    let then: Vec<i64> = read_json(&db.url, &["--stream", "order/o/42", "--as-of", &between])
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(then, [v1, v2], "as of a time before version 3");

    let (code, table, err) = cli(&db.url, &["events", "read", "--stream", "order/o/42"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[0].contains("VERSION") && lines[2].contains("OrderPaid") && lines[2].contains("{\"n\": 2}"),
        "{table}"
    );

    // Bad input: refused with a fix.
    for (args, expect) in [
        (vec!["--stream", "order"], "is not STREAM_TYPE/STREAM_ID"),
        (vec!["--stream", "order/nope"], "stream order/nope has no events"),
        (vec!["--stream", "order/o/43", "--to-version", "1"], "has no versions"),
        (vec!["--stream", "order/o/42", "--to-version", "0"], "versions start at 1"),
    ] {
        let mut all = vec!["events", "read"];
        all.extend_from_slice(&args);
        let (code, out, err) = cli(&db.url, &all);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(expect) && err.contains("fix:"), "{args:?}: {err}");
    }
    let (code, _, err) = cli(&db.url, &["events", "read", "--stream", "order/o/42", "--as-of", "yesterday"]);
    assert_eq!(code, 2, "clap refuses a time that is not RFC 3339: {err}");
}
