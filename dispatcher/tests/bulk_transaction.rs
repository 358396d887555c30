//! One transaction that appends many events (a bulk import): each batch read from a cursor inside
//! it reads about one batch of rows, not every event of the transaction after the cursor.
mod common;

use common::*;
use highwater::Xid8;

const EVENTS: i64 = 60_000;

/// Buffers (8 kB pages) the statement `read` touched, from its plan's own accounting, and how
/// many events it returned: the function's inner statement counts under its node.
async fn pages_read(conn: &mut sqlx::PgConnection, read: &str, tx: Xid8, id: i64) -> (i64, i64) {
    let plan: serde_json::Value =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {read}")))
            .bind(tx)
            .bind(id)
            .fetch_one(conn)
            .await
            .unwrap();
    let top = &plan[0]["Plan"];
    let pages = top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap();
    (top["Actual Rows"].as_i64().unwrap(), pages)
}

/// `EVENTS` events appended in one transaction, then what autovacuum does after a bulk load: the
/// statistics now say one transaction id.
async fn bulk_load(pool: &sqlx::PgPool) {
    sqlx::query(
        "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload)
         SELECT 'order', 'o-' || (g % 1000), 'OrderPlaced', jsonb_build_object('n', g)
           FROM generate_series(1, $1) g",
    )
    .bind(EVENTS)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE highwater.events").execute(pool).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_inside_a_large_transaction_reads_one_batch_of_rows() {
    let db = setup(&["OrderPlaced"]).await;
    bulk_load(&db.pool).await;
    let (tx, middle): (Xid8, i64) =
        sqlx::query_as("SELECT tx_id, id FROM highwater.events ORDER BY tx_id, id OFFSET $1 LIMIT 1")
            .bind(EVENTS / 2)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let reads = [
        ("events_after", "SELECT * FROM highwater.events_after($1, $2, '{}', 1000, '{}')"),
        (
            "shard_events_after (a partition)",
            "SELECT * FROM highwater.shard_events_after($1, $2, '{}', 1000, '{}', 0, 1, NULL, NULL)",
        ),
    ];
    // One session: PL/pgSQL keeps a function's plans per session.
    let conn = &mut *db.pool.acquire().await.unwrap();
    for (what, read) in reads {
        // The first call compiles the function and plans its statement (catalog pages); then more
        // than the five custom plans PL/pgSQL tries before it may settle on a generic one.
        pages_read(conn, read, tx, middle).await;
        for _ in 0..8 {
            let (returned, pages) = pages_read(conn, read, tx, middle).await;
            assert_eq!(returned, 1000, "{what}");
            // One batch lies on a few dozen pages; the rest of the transaction on about a thousand.
            assert!(
                pages <= 150,
                "{what}: {pages} pages read for a batch of 1,000 events with {} events after the cursor",
                EVENTS / 2
            );
        }
    }
}

/// The SQL sink's apply reads its batch server-side as the range from the batch's first event to
/// its last (migration 20261202000040): inside one large transaction that range is one batch of
/// rows too, whatever plan PL/pgSQL settles on for the loop's query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sql_sink_batch_inside_a_large_transaction_reads_one_batch_of_rows() {
    let db = setup(&["OrderPlaced"]).await;
    bulk_load(&db.pool).await;
    let (tx, ids): (Xid8, Vec<i64>) = sqlx::query_as(
        "SELECT min(tx_id), array_agg(id ORDER BY tx_id, id)
           FROM (SELECT tx_id, id FROM highwater.events ORDER BY tx_id, id OFFSET $1 LIMIT 1000) b",
    )
    .bind(EVENTS / 2)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // A statement that touches no table: the pages counted are the batch's read.
    let (form, statement) = ("perEvent", "SELECT $2");
    let conn = &mut *db.pool.acquire().await.unwrap();
    let prepared: Option<String> = sqlx::query_scalar("SELECT highwater.sql_sink_prepare($1, $2)")
        .bind(form)
        .bind(statement)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(prepared, None);
    for call in 0..9 {
        let plan: serde_json::Value = sqlx::query_scalar(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
             SELECT * FROM highwater.sql_sink_apply($1, $2, NULL, false, $3, $3, $4)",
        )
        .bind(form)
        .bind(statement)
        .bind(tx)
        .bind(&ids)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        let top = &plan[0]["Plan"];
        let pages = top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap();
        // The first call compiles the functions (catalog pages); the sixth plans generically,
        // reading the catalog of every partition's indexes too: 288 pages, up to ~510 when another
        // test's DDL has just invalidated the cache. Every other call reads 132 pages, where
        // reading the batch as `tx_id BETWEEN lo AND hi AND id = ANY (ids)` took about 2,000,
        // every event of the transaction after the cursor.
        eprintln!("call {call}: {pages} pages");
        match call {
            0 => {}
            5 => {
                assert!(pages <= 700, "call {call} (generic plan): {pages} pages read to apply a batch of 1,000 events")
            }
            _ => assert!(pages <= 300, "call {call}: {pages} pages read to apply a batch of 1,000 events"),
        }
    }
}
