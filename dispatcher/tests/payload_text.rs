//! External sinks get an event's payload and metadata as the JSON text PostgreSQL stored, not a
//! re-encoding of it: numbers beyond a double's precision keep every digit, escapes and non-ASCII
//! text arrive as stored.
mod common;

use std::{collections::HashMap, time::Duration};

use common::*;
use serde_json::value::RawValue;

/// Payloads a client would not think to try: what an `f64` would round, what needs escaping.
const PAYLOADS: &[&str] = &[
    r#"{"amount": 123456789012345678901234567890.123456789, "id": 9007199254740993}"#,
    r#"{"tiny": 1.000000000000000000000001, "exp": 1e400}"#,
    r#"{"text": "quote \" backslash \\ tab \t newline \n nul-free \u0001", "emoji": "🦀", "ü": "ß"}"#,
    r#"{"nested": {"list": [1, [2, {"k\"ey": null}], true], "empty": {}}, "s": "</script>"}"#,
    r#"[1, "not an object", {"a": []}]"#,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_sink_writes_payload_and_metadata_as_stored() {
    let db = setup(&["Tick"]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sink.jsonl");
    apply(&db.pool, &consumer("raw", &format!("delivery: Shared\nsink: {{log: {{target: '{}'}}}}", out.display())))
        .await;

    let mut ids = Vec::new();
    for p in PAYLOADS {
        // The text goes in as SQL text, never through a serde_json::Value on the way in either.
        let id: i64 = sqlx::query_scalar(
            "SELECT highwater.append('s', '1', 'Tick', $1::jsonb, jsonb_build_object('note', $2::text))",
        )
        .bind(p)
        .bind("metadata \"with\" escapes ✓")
        .fetch_one(&db.pool)
        .await
        .unwrap();
        ids.push(id);
    }

    let _d = Dispatcher::start(&db.url, "p0", dir.path());
    let out2 = out.clone();
    eventually("every event in the log sink's file", Duration::from_secs(60), || {
        let out = out2.clone();
        async move { std::fs::read_to_string(&out).unwrap_or_default().lines().count() >= PAYLOADS.len() }
    })
    .await;

    let lines: Vec<String> = std::fs::read_to_string(&out).unwrap().lines().map(String::from).collect();
    assert_eq!(lines.len(), PAYLOADS.len(), "one line per event: {lines:#?}");
    for (line, id) in lines.iter().zip(&ids) {
        let (payload, metadata): (String, String) =
            sqlx::query_as("SELECT payload::text, metadata::text FROM highwater.events WHERE id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert!(
            line.contains(&format!("\"payload\":{payload}")),
            "payload of event {id} as stored: {payload}\nline: {line}"
        );
        assert!(
            line.contains(&format!("\"metadata\":{metadata}")),
            "metadata of event {id} as stored: {metadata}\nline: {line}"
        );
        // As raw values: `1e400` is valid JSON that no f64 holds, so a reader must not need one.
        let fields: HashMap<String, Box<RawValue>> = serde_json::from_str(line).expect("each line is one JSON object");
        let event: HashMap<String, Box<RawValue>> = serde_json::from_str(fields["event"].get()).unwrap();
        assert_eq!(event["id"].get(), id.to_string());
    }
    assert!(lines[0].contains("123456789012345678901234567890.123456789"), "{}", lines[0]);
    assert!(lines[0].contains("9007199254740993"), "2^53 + 1 is not rounded: {}", lines[0]);
}
