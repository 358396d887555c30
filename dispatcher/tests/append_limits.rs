//! The size limits of an append (docs/events.md "Limits"): stream type 200 bytes, stream id 1024
//! bytes, event type 200 bytes, payload 64 MiB as jsonb. Each is refused by `highwater.append`
//! itself with SQLSTATE HW030 naming the field, its size, the limit and the fix, so every writer
//! (Rust, SQL, the clients, the CLI) gets the same refusal; exactly at the limit is stored.
mod common;

use common::*;
use highwater::{Error, NewEvent, append, events::append_version};
use serde_json::json;

const LIMIT_PAYLOAD: i64 = 64 << 20;

fn event(stream_type: &str, stream_id: &str, event_type: &str, expected: Option<i64>) -> NewEvent {
    NewEvent { expected_version: expected, ..NewEvent::new(stream_type, stream_id, event_type, json!({})) }
}

/// Appends in its own transaction, committed on success.
async fn try_append(pool: &sqlx::PgPool, ev: &NewEvent) -> Result<i64, Error> {
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, ev).await?;
    tx.commit().await.unwrap();
    Ok(id)
}

/// The refusal of an over-limit `ev`: `Error::InvalidPayload` whose text names `needles` and
/// carries a fix line.
async fn refused(pool: &sqlx::PgPool, ev: &NewEvent, needles: &[&str]) {
    let e = try_append(pool, ev).await.unwrap_err();
    assert!(matches!(e, Error::InvalidPayload { .. }), "{e:?}");
    let text = e.to_string();
    for n in needles {
        assert!(text.contains(n), "{n:?} missing from: {text}");
    }
    assert!(text.contains("\n  fix: "), "{text}");
}

async fn sqlstate(pool: &sqlx::PgPool, sql: &'static str) -> Option<String> {
    match sqlx::query(sql).execute(pool).await {
        Ok(_) => None,
        Err(e) => e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned()),
    }
}

#[tokio::test]
async fn stream_keys_and_event_types_are_limited_in_bytes_with_and_without_expected_version() {
    let db = setup(&["Tick"]).await;
    // 1024 bytes in 1-, 2- and 4-byte characters, each one byte short of a refusal.
    let ids = ["x".repeat(1024), "é".repeat(512), "😀".repeat(256)];
    for expected in [None, Some(0)] {
        // 200 bytes in 100 characters; one stream type per pass, so that every versioned stream
        // is new.
        let stream_type = if expected.is_some() { "ä" } else { "ü" }.repeat(100);
        for id in &ids {
            assert_eq!((stream_type.len(), id.len()), (200, 1024));
            // At the limits of both, together: the largest key stream_versions' index holds.
            try_append(&db.pool, &event(&stream_type, id, "Tick", expected)).await.unwrap();
        }
        // One byte over: a byte more, or one 1-byte character swapped for a 2-byte one.
        let over = ["x".repeat(1025), format!("{}é", "x".repeat(1023))];
        for id in &over {
            refused(
                &db.pool,
                &event("order", id, "Tick", expected),
                &["stream id \"xxx", "1025 bytes", "the limit is 1024 bytes"],
            )
            .await;
        }
        refused(
            &db.pool,
            &event(&format!("{stream_type}x"), "1", "Tick", expected),
            &["stream type \"", "201 bytes", "the limit is 200 bytes"],
        )
        .await;
        // The case of issue 44: 3,000+ characters with an expected version used to fail with
        // PostgreSQL's `index row size 3016 exceeds btree version 4 maximum 2704`.
        refused(&db.pool, &event("order", &"k".repeat(3008), "Tick", expected), &["3008 bytes", "shorter id"]).await;
        // An event type over 200 bytes can never be registered: refused with the rule.
        refused(
            &db.pool,
            &event("order", "1", &"T".repeat(201), expected),
            &["event type \"TTT", "201 bytes", "limit is 200"],
        )
        .await;
    }
    let stored = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await;
    assert_eq!(stored, 6, "every append at the limits stored, none over them");
    let heads =
        scalar_i64(&db.pool, "SELECT count(*) FROM highwater.stream_versions WHERE octet_length(stream_id) = 1024")
            .await;
    assert_eq!(heads, 3, "the versioned streams at the limits have their head rows");

    // The eight-argument append and plain SQL get the same refusal, with its own SQLSTATE.
    let mut tx = db.pool.begin().await.unwrap();
    let e = append_version(&mut tx, &event("order", &"x".repeat(1025), "Tick", None), 1).await.unwrap_err();
    assert!(matches!(e, Error::InvalidPayload { .. }) && e.to_string().contains("1025 bytes"), "{e:?}");
    drop(tx);
    let code =
        sqlstate(&db.pool, "SELECT highwater.append('order', repeat('x', 1025), 'Tick', '{}', NULL, NULL, 0)").await;
    assert_eq!(code.as_deref(), Some("HW030"));
    let code = sqlstate(&db.pool, "SELECT highwater.append_position(repeat('é', 101), '1', 'Tick', '{}')").await;
    assert_eq!(code.as_deref(), Some("HW030"));

    // The CLI prints the problem and the fix, exit 1.
    let id = "k".repeat(3008);
    let out = std::process::Command::new(bin())
        .args(["events", "append", "--stream-type", "order", "--stream-id", &id, "--type", "Tick", "--payload", "{}"])
        .args(["--expected-version", "0"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("3008 bytes") && err.contains("limit is 1024 bytes") && err.contains("fix:"), "{err}");
    assert!(!err.contains("index row size"), "{err}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await, 6, "nothing stored on refusal");
}

#[tokio::test]
async fn payloads_are_limited_to_64_mib_as_jsonb_even_when_passed_compressed() {
    let db = setup(&["Tick"]).await;
    // {"b": "xx…"}: its jsonb size grows by one byte per character; find the length at the limit.
    let (small,): (i64,) = sqlx::query_as("SELECT pg_column_size(jsonb_build_object('b', repeat('x', 1000)))::bigint")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let at_limit = LIMIT_PAYLOAD - (small - 1000);
    let (size,): (i64,) =
        sqlx::query_as("SELECT pg_column_size(jsonb_build_object('b', repeat('x', $1::int)))::bigint")
            .bind(at_limit)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(size, LIMIT_PAYLOAD, "the payload is exactly at the limit");

    let append =
        "SELECT highwater.append('s', $2, 'Tick', jsonb_build_object('b', repeat('x', $1::int)), NULL, NULL, $3)";
    for expected in [None, Some(0_i64)] {
        let stream = format!("at-{expected:?}");
        sqlx::query(append).bind(at_limit).bind(&stream).bind(expected).execute(&db.pool).await.unwrap();
        let e = sqlx::query(append).bind(at_limit + 1).bind("over").bind(expected).execute(&db.pool).await.unwrap_err();
        let Error::InvalidPayload { message, hint } = Error::from_append(e) else { panic!("not InvalidPayload") };
        assert!(
            message.contains(&format!("is {} bytes", LIMIT_PAYLOAD + 1)) && message.contains("64 MiB"),
            "{message}"
        );
        assert!(hint.is_some_and(|h| h.contains("object store")));
    }

    // A payload read from a table arrives compressed (a few kB for 64 MiB of 'x'): it is measured
    // as it is, uncompressed.
    sqlx::raw_sql("CREATE TABLE big (n int, p jsonb)").execute(&db.pool).await.unwrap();
    sqlx::query(
        "INSERT INTO big SELECT n, jsonb_build_object('b', repeat('x', n)) FROM unnest(array[$1::int, 1000000]) n",
    )
    .bind(at_limit + 1)
    .execute(&db.pool)
    .await
    .unwrap();
    let compressed = scalar_i64(&db.pool, "SELECT max(pg_column_size(p))::bigint FROM big").await;
    assert!(compressed < 1 << 20, "stored compressed ({compressed} bytes)");
    let code = sqlstate(&db.pool, "SELECT highwater.append('s', 'c', 'Tick', p) FROM big WHERE n > 1000000").await;
    assert_eq!(code.as_deref(), Some("HW030"));
    assert_eq!(
        sqlstate(&db.pool, "SELECT highwater.append('s', 'c', 'Tick', p) FROM big WHERE n = 1000000").await,
        None
    );
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await, 3, "nothing over the limit stored");
}
