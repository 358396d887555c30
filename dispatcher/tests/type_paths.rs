//! The reads by event type (issue 38, 20261204000100_type_index.sql): a consumer of one to four
//! types reads them from the index on (event_type, tx_id, id), and a SQL sink whose batch is a
//! small part of its range reads it by id. Each path must return exactly what walking
//! (tx_id, id) and dropping the other types returns: the same events, in the same order, from
//! any cursor (inside a transaction too), with any limit, passed-over events, partitions and
//! barriers.
mod common;

use std::time::Duration;

use common::*;
use highwater::Xid8;

const TYPES: [&str; 6] = ["T0", "T1", "T2", "T3", "T4", "T5"];

/// 40 transactions of 1 to 40 events; T0 is hot (every other event), the rest share the remainder.
async fn backlog(pool: &sqlx::PgPool) {
    for t in 0..40i64 {
        sqlx::query(
            "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload)
             SELECT 'order', 'o-' || ((g * 7 + $1) % 13),
                    CASE WHEN g % 2 = 0 THEN 'T0' ELSE 'T' || (1 + (g + $1) % 5) END, '{}'
               FROM generate_series(1, $2::bigint) g",
        )
        .bind(t)
        .bind(1 + (t * 17) % 40)
        .execute(pool)
        .await
        .unwrap();
    }
}

fn sets() -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    vec![
        s(&[]),
        s(&["T1"]),
        s(&["T0"]),
        s(&["T3", "T3"]),
        s(&["T2", "T5"]),
        s(&["T1", "T2", "T4", "T0"]),
        s(&["T1", "T2", "T3", "T4", "T5"]),
        s(&["T5", "Nope"]),
    ]
}

#[tokio::test]
async fn each_read_path_returns_what_the_walk_returns() {
    let db = setup(&TYPES).await;
    backlog(&db.pool).await;
    let positions: Vec<(Xid8, i64)> =
        sqlx::query_as("SELECT tx_id, id FROM highwater.events ORDER BY tx_id, id").fetch_all(&db.pool).await.unwrap();
    let mut cursors = vec![(Xid8(0), 0i64)];
    cursors.extend(positions.iter().step_by(53).copied());
    cursors.push(*positions.last().unwrap());
    let skip: Vec<i64> = positions.iter().step_by(11).map(|p| p.1).collect();
    let barrier = positions[positions.len() * 2 / 3];
    let mut compared = 0;
    for types in sets() {
        for &(tx, id) in &cursors {
            for limit in [1i64, 7, 1000] {
                for skip in [&[][..], &skip[..]] {
                    let walk: Vec<i64> = sqlx::query_scalar(
                        "SELECT id FROM highwater.events
                          WHERE (tx_id, id) > ($1, $2) AND (cardinality($3::text[]) = 0 OR event_type = ANY ($3))
                            AND NOT (id = ANY ($5)) ORDER BY tx_id, id LIMIT $4",
                    )
                    .bind(tx)
                    .bind(id)
                    .bind(&types)
                    .bind(limit)
                    .bind(skip)
                    .fetch_all(&db.pool)
                    .await
                    .unwrap();
                    let read: Vec<i64> =
                        sqlx::query_scalar("SELECT id FROM highwater.events_after($1, $2, $3, $4, $5)")
                            .bind(tx)
                            .bind(id)
                            .bind(&types)
                            .bind(limit)
                            .bind(skip)
                            .fetch_all(&db.pool)
                            .await
                            .unwrap();
                    assert_eq!(read, walk, "events_after types {types:?} from ({tx:?}, {id}) limit {limit}");
                    compared += 1;
                    for part in 0..3 {
                        for until in [None, Some(barrier)] {
                            let walk: Vec<i64> = sqlx::query_scalar(
                                "SELECT id FROM highwater.events
                                  WHERE (tx_id, id) > ($1, $2) AND (cardinality($3::text[]) = 0 OR event_type = ANY ($3))
                                    AND NOT (id = ANY ($5)) AND highwater.stream_partition(stream_type, stream_id, 3) = $6
                                    AND ($7::xid8 IS NULL OR (tx_id, id) <= ($7, $8))
                                  ORDER BY tx_id, id LIMIT $4",
                            )
                            .bind(tx)
                            .bind(id)
                            .bind(&types)
                            .bind(limit)
                            .bind(skip)
                            .bind(part)
                            .bind(until.map(|u| u.0))
                            .bind(until.map(|u| u.1))
                            .fetch_all(&db.pool)
                            .await
                            .unwrap();
                            let read: Vec<i64> = sqlx::query_scalar(
                                "SELECT id FROM highwater.shard_events_after($1, $2, $3, $4, $5, $6, 3, $7, $8)",
                            )
                            .bind(tx)
                            .bind(id)
                            .bind(&types)
                            .bind(limit)
                            .bind(skip)
                            .bind(part)
                            .bind(until.map(|u| u.0))
                            .bind(until.map(|u| u.1))
                            .fetch_all(&db.pool)
                            .await
                            .unwrap();
                            assert_eq!(
                                read, walk,
                                "shard_events_after types {types:?} from ({tx:?}, {id}) limit {limit} part {part} until {until:?}"
                            );
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 300, "{compared}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_sinks_of_a_few_types_apply_exactly_their_events_once() {
    let db = setup(&TYPES).await;
    backlog(&db.pool).await;
    sqlx::raw_sql("CREATE TABLE seen (consumer text NOT NULL, event_id bigint NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    // One consumer per type (batches far sparser than their ranges: read by id), one of two types
    // in the set form, one of every type (dense batches: the range walked).
    let mut yaml = String::new();
    for t in TYPES {
        yaml += &consumer(
            &format!("one-{}", t.to_lowercase()),
            &format!(
                "delivery: Shared\nbatchSize: 10\neventTypes: [{t}]\nsink: {{sql: {{statement: \"INSERT INTO seen VALUES ('{t}', $2)\"}}}}"
            ),
        );
    }
    yaml += &consumer(
        "two",
        "delivery: Shared\nbatchSize: 10\neventTypes: [T2, T4]\nsink: {sql: {form: set, statement: \"INSERT INTO seen SELECT 'two', id FROM highwater_batch\"}}",
    );
    yaml += &consumer(
        "all",
        "delivery: Shared\nbatchSize: 50\nsink: {sql: {statement: \"INSERT INTO seen VALUES ('all', $2)\"}}",
    );
    apply(&db.pool, &yaml).await;
    let total = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "d0", logs.path());
    let two = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events WHERE event_type IN ('T2', 'T4')").await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 2 * total + two, Duration::from_secs(60)).await;
    // Nothing more arrives: let the passes that are still running finish before counting again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wrong: Vec<(String, i64, i64)> = sqlx::query_as(
        "WITH want AS (
            SELECT event_type AS consumer, id FROM highwater.events
            UNION ALL SELECT 'two', id FROM highwater.events WHERE event_type IN ('T2', 'T4')
            UNION ALL SELECT 'all', id FROM highwater.events),
         got AS (SELECT consumer, event_id AS id, count(*) AS n FROM seen GROUP BY 1, 2)
         SELECT coalesce(w.consumer, g.consumer), coalesce(w.id, g.id), coalesce(g.n, 0)
           FROM want w FULL JOIN got g ON g.consumer = w.consumer AND g.id = w.id
          WHERE g.n IS DISTINCT FROM 1 OR w.id IS NULL",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(wrong.is_empty(), "events applied other than once, or not theirs: {wrong:?}");
}
