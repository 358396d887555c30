//! The reads by event type (issue 38, 20261204000100_type_index.sql): a consumer of one to four
//! types reads them from the index on (event_type, tx_id, id), and a SQL sink whose batch is a
//! small part of its range reads it by id. Each path must return exactly what walking
//! (tx_id, id) and dropping the other types returns: the same events, in the same order, from
//! any cursor (inside a transaction too), with any limit, passed-over events, partitions and
//! barriers. Each comparison runs over two backlogs: transactions of 1 to 40 events, and a few
//! transactions of hundreds of events each, the types interleaved inside them (a business
//! transaction that emits several events, a bulk import; issue 44: a sparse batch's lookup then
//! scanned the whole transaction range per event).
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

/// 8 transactions of 150 to 500 events, types interleaved inside each (T0 every other event, as
/// in [`backlog`]): a batch of any type but T0 spans several transactions and starts and ends
/// inside them.
async fn big_transactions(pool: &sqlx::PgPool) {
    for t in 0..8i64 {
        sqlx::query(
            "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload)
             SELECT 'order', 'o-' || ((g * 7 + $1) % 13),
                    CASE WHEN g % 2 = 0 THEN 'T0' ELSE 'T' || (1 + (g + $1) % 5) END, '{}'
               FROM generate_series(1, $2::bigint) g",
        )
        .bind(t)
        .bind(150 + (t * 53) % 351)
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
    let db = shared(&TYPES).await;
    backlog(&db.pool).await;
    read_paths_return_what_the_walk_returns(&db).await;
}

#[tokio::test]
async fn each_read_path_returns_what_the_walk_returns_in_transactions_of_many_events() {
    let db = shared(&TYPES).await;
    big_transactions(&db.pool).await;
    read_paths_return_what_the_walk_returns(&db).await;
}

async fn read_paths_return_what_the_walk_returns(db: &TestDb) {
    let positions: Vec<(Xid8, i64)> =
        sqlx::query_as("SELECT tx_id, id FROM highwater.events ORDER BY tx_id, id").fetch_all(&db.pool).await.unwrap();
    let mut cursors = vec![(Xid8(0), 0i64)];
    // About 16 cursors, whatever the backlog's size.
    cursors.extend(positions.iter().step_by(positions.len() / 15).copied());
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
    let db = shared(&TYPES).await;
    backlog(&db.pool).await;
    sinks_apply_exactly_their_events_once(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_sinks_of_a_few_types_apply_exactly_their_events_once_in_transactions_of_many_events() {
    let db = shared(&TYPES).await;
    big_transactions(&db.pool).await;
    sinks_apply_exactly_their_events_once(&db).await;
}

async fn sinks_apply_exactly_their_events_once(db: &TestDb) {
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

/// The SQL sink's own read (sql_sink_prepare.sql): a batch cut anywhere from the walk of some
/// types (inside transactions too), dense (its range walked) or sparse (each event looked up by
/// its position), reaches the statement as exactly the batch, in its order: in the per-event form,
/// in the set form one event at a time and (as a set) in the set form, named by positions
/// (`sql_sink_apply_positions`, the dispatcher's call) and by ids alone (`sql_sink_apply`, a
/// previous release's dispatcher's), with and without `eventVersions` (the payloads' own lookup).
#[tokio::test]
async fn the_sql_sink_s_read_applies_each_batch_exactly_in_its_order() {
    let db = shared(&TYPES).await;
    backlog(&db.pool).await;
    sink_reads_apply_each_batch_in_its_order(&db).await;
}

#[tokio::test]
async fn the_sql_sink_s_read_applies_each_batch_exactly_in_its_order_in_transactions_of_many_events() {
    let db = shared(&TYPES).await;
    big_transactions(&db.pool).await;
    sink_reads_apply_each_batch_in_its_order(&db).await;
}

async fn sink_reads_apply_each_batch_in_its_order(db: &TestDb) {
    sqlx::raw_sql("CREATE TABLE applied (n bigserial PRIMARY KEY, event_id bigint NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    const PER_EVENT: (&str, &str) = ("perEvent", "INSERT INTO applied (event_id) VALUES ($2)");
    const SET: (&str, &str) = ("set", "INSERT INTO applied (event_id) SELECT id FROM highwater_batch");
    // With `eventVersions` the payloads are looked up apart (one per event, in the batch's order):
    // an event whose payload was not found reaches the statement with NULL and is not recorded.
    const UPCAST: (&str, &str) = ("perEvent", "INSERT INTO applied (event_id) SELECT $2 WHERE $1 = '{}'::jsonb");
    let conn = &mut *db.pool.acquire().await.unwrap();
    for (form, statement) in [PER_EVENT, SET, UPCAST] {
        let problem: Option<String> = sqlx::query_scalar("SELECT highwater.sql_sink_prepare($1, $2)")
            .bind(form)
            .bind(statement)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(problem, None, "{form}");
    }
    let (mut sparse, mut dense) = (0, 0);
    for types in [&["T0"][..], &["T1"], &["T2", "T5"], &TYPES] {
        let walk: Vec<(Xid8, i64)> =
            sqlx::query_as("SELECT tx_id, id FROM highwater.events WHERE event_type = ANY ($1) ORDER BY tx_id, id")
                .bind(types)
                .fetch_all(&mut *conn)
                .await
                .unwrap();
        for size in [1usize, 7, 100] {
            let chunks: Vec<&[(Xid8, i64)]> = walk.chunks(size).collect();
            for batch in chunks.iter().step_by((chunks.len() / 6).max(1)) {
                let tx_ids: Vec<Xid8> = batch.iter().map(|p| p.0).collect();
                let ids: Vec<i64> = batch.iter().map(|p| p.1).collect();
                // The generated code's choice (sql_sink_prepare.sql), to know both were compared.
                if ids.len() > 1 && ids[ids.len() - 1] - ids[0] >= 4 * ids.len() as i64 {
                    sparse += 1;
                } else if ids.len() > 1 {
                    dense += 1;
                }
                for ((form, statement), single, by_position) in [
                    (PER_EVENT, false, true),
                    (PER_EVENT, false, false),
                    (SET, true, true),
                    (SET, true, false),
                    (SET, false, true),
                    (SET, false, false),
                    (UPCAST, false, true),
                    (UPCAST, false, false),
                ] {
                    sqlx::query("DELETE FROM applied").execute(&mut *conn).await.unwrap();
                    let versions = if statement == UPCAST.1 { r#"{"*": "stored"}"# } else { "" };
                    sqlx::query("SELECT set_config('highwater.event_versions', $1, false)")
                        .bind(versions)
                        .execute(&mut *conn)
                        .await
                        .unwrap();
                    let call = if by_position {
                        sqlx::query_as::<_, (Option<i32>, Option<String>)>(
                            "SELECT failed, message FROM highwater.sql_sink_apply_positions($1, $2, NULL, $3, $4, $5)",
                        )
                        .bind(form)
                        .bind(statement)
                        .bind(single)
                        .bind(&tx_ids)
                        .bind(&ids)
                    } else {
                        sqlx::query_as::<_, (Option<i32>, Option<String>)>(
                            "SELECT failed, message FROM highwater.sql_sink_apply($1, $2, NULL, $3, $4, $5, $6)",
                        )
                        .bind(form)
                        .bind(statement)
                        .bind(single)
                        .bind(tx_ids[0])
                        .bind(tx_ids[tx_ids.len() - 1])
                        .bind(&ids)
                    };
                    let what = format!(
                        "{form} single {single} by position {by_position} versions {versions:?} types {types:?} batch {ids:?}"
                    );
                    let (failed, message) = call.fetch_one(&mut *conn).await.expect(&what);
                    assert_eq!(failed, None, "{what}: {message:?}");
                    let mut applied: Vec<i64> = sqlx::query_scalar("SELECT event_id FROM applied ORDER BY n")
                        .fetch_all(&mut *conn)
                        .await
                        .unwrap();
                    if form == "set" && !single {
                        // One statement over the batch: its rows' order is the statement's.
                        applied.sort_by_key(|id| ids.iter().position(|i| i == id));
                    }
                    assert_eq!(applied, ids, "{what}");
                }
            }
        }
    }
    assert!(sparse >= 5 && dense >= 5, "sparse batches {sparse}, dense {dense}: both reads compared");
}

/// Issue 44: with the ids alone, a sparse batch's lookup ran on the generic plan as the index
/// condition `tx_id >= lo AND tx_id <= hi AND id = u.id`, a scan of the batch's whole transaction
/// range for every event (309 ms for a batch of 100 with 500 events a transaction). The lookup
/// query is taken from the session's generated function itself and planned as PL/pgSQL plans it
/// (its variables are parameters), generic; every index condition that looks an event up must be
/// a point: an equality on id, and on tx_id too where the index leads with tx_id.
#[tokio::test]
async fn a_sparse_batch_looks_each_event_up_by_its_position_on_the_generic_plan() {
    let db = shared(&TYPES).await;
    big_transactions(&db.pool).await;
    let conn = &mut *db.pool.acquire().await.unwrap();
    let statement = "SELECT $2";
    let problem: Option<String> = sqlx::query_scalar("SELECT highwater.sql_sink_prepare('perEvent', $1)")
        .bind(statement)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(problem, None);
    let function: String = sqlx::query_scalar(
        "SELECT pg_get_functiondef(p.oid) FROM pg_proc p
          WHERE p.pronamespace = pg_my_temp_schema() AND p.proname = highwater.sql_sink_name('perEvent', $1) || '_batch'",
    )
    .bind(statement)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let start = function.find("FOR r IN ").expect("the batch function's loop") + "FOR r IN ".len();
    let len = function[start..].find(" LOOP").expect("the end of the loop's query");
    let query = parameters(
        &function[start..start + len],
        &[("v_walk", "$1"), ("p_lo", "$2"), ("p_hi", "$3"), ("p_ids", "$4"), ("v_n", "$5"), ("p_tx_ids", "$6")],
    );
    assert!(query.contains("highwater.events"), "{query}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET plan_cache_mode = force_generic_plan;
         PREPARE batch_read (boolean, xid8, xid8, bigint[], integer, xid8[]) AS {query}"
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    // A batch of 100 T1 events: a tenth of each transaction's events, so sparse.
    let (tx_ids, ids): (Vec<Xid8>, Vec<i64>) = sqlx::query_as(
        "SELECT array_agg(tx_id ORDER BY tx_id, id), array_agg(id ORDER BY tx_id, id)
           FROM (SELECT tx_id, id FROM highwater.events WHERE event_type = 'T1' ORDER BY tx_id, id LIMIT 100) b",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert!(ids[99] - ids[0] >= 400, "the batch is sparse: {} .. {}", ids[0], ids[99]);
    let list = |v: Vec<String>| v.join(",");
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (FORMAT JSON) EXECUTE batch_read (false, '{lo}', '{hi}', '{{{ids}}}', {n}, '{{{tx_ids}}}')",
        lo = tx_ids[0],
        hi = tx_ids[99],
        ids = list(ids.iter().map(|i| i.to_string()).collect()),
        n = ids.len(),
        tx_ids = list(tx_ids.iter().map(|t| t.to_string()).collect()),
    )))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let mut lookups = Vec::new();
    index_conditions(&plan[0]["Plan"], &mut lookups);
    let lookups: Vec<(String, String)> = lookups.into_iter().filter(|(_, c)| c.contains("u.id")).collect();
    assert!(!lookups.is_empty(), "no index lookup of the batch's events in the plan: {plan:#}");
    for (index, cond) in &lookups {
        let point = cond.contains("(id = u.id)") && (cond.contains("(tx_id = u.tx_id)") || !index.contains("tx_id"));
        assert!(point, "{index}: Index Cond {cond} is not a point lookup; plan: {plan:#}");
    }
}

/// `sql` with each whole identifier `names[i].0` replaced by `names[i].1`.
fn parameters(sql: &str, names: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(names.iter().find(|(n, _)| *n == word.as_str()).map_or(word.as_str(), |(_, p)| p));
        word.clear();
    };
    for c in sql.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// (index name, index condition) of every node of an EXPLAIN (FORMAT JSON) plan.
fn index_conditions(node: &serde_json::Value, out: &mut Vec<(String, String)>) {
    if let Some(cond) = node["Index Cond"].as_str() {
        out.push((node["Index Name"].as_str().unwrap_or_default().to_owned(), cond.to_owned()));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        index_conditions(child, out);
    }
}
