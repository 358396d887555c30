//! The SQL sink runs a batch server-side (issue 14): per event (`form: perEvent`) or once over
//! the batch (`form: set`), with the per-event semantics of the old client loop: the failing
//! event found exactly, the events before it applied, a batch-wide timeout that is no event's
//! fault deferred rather than counted, and the nine columns delivered as stored.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, Xid8, append};
use serde_json::json;
use sqlx::PgPool;

const PER_EVENT_DIVIDE: &str = "INSERT INTO proj (event_id, q) VALUES ($2, 100 / ($1->>'n')::int)";
const SET_DIVIDE: &str = "INSERT INTO proj (event_id, q) SELECT id, 100 / (payload->>'n')::int FROM highwater_batch";

/// Shard row of a shared consumer: status, attempts, failing event, cursor id, last error.
async fn shard(pool: &PgPool, consumer: &str) -> (String, i32, Option<i64>, i64, Option<String>) {
    sqlx::query_as(
        "SELECT status, attempts, failing_event_id, cursor_id, last_error
           FROM highwater.consumer_shards WHERE consumer = $1",
    )
    .bind(consumer)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Counts the calls of the SQL sink's two functions from now on: each is renamed and a wrapper
/// of its signature takes its name, counts the call in a sequence of the test's own and calls it.
/// A sequence is current the moment `nextval` returns and is not rolled back with the caller's
/// transaction (a call whose batch failed still counts), so [`calls`] reads it without waiting;
/// `pg_stat_user_functions`, counted before, reaches the reader asynchronously (PostgreSQL 14
/// sends it to the statistics collector over a socket; later versions when a session ends or
/// idles), so a loaded machine read it before the last calls arrived.
async fn count_sink_calls(pool: &PgPool) {
    sqlx::raw_sql(
        r#"
        CREATE SEQUENCE public.sql_sink_prepare_calls;
        CREATE SEQUENCE public.sql_sink_apply_calls;
        ALTER FUNCTION highwater.sql_sink_prepare(text, text) RENAME TO sql_sink_prepare_counted;
        CREATE FUNCTION highwater.sql_sink_prepare(p_form text, p_statement text) RETURNS text
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM nextval('public.sql_sink_prepare_calls');
            RETURN highwater.sql_sink_prepare_counted(p_form, p_statement);
        END $$;
        ALTER FUNCTION highwater.sql_sink_apply_positions(text, text, text, boolean, xid8[], bigint[])
            RENAME TO sql_sink_apply_positions_counted;
        CREATE FUNCTION highwater.sql_sink_apply_positions(
            p_form text, p_statement text, p_role text, p_single boolean, p_tx_ids xid8[], p_ids bigint[],
            OUT failed integer, OUT deferred boolean, OUT message text)
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM nextval('public.sql_sink_apply_calls');
            SELECT * INTO failed, deferred, message
              FROM highwater.sql_sink_apply_positions_counted(p_form, p_statement, p_role, p_single, p_tx_ids, p_ids);
        END $$;
        "#,
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Calls of `highwater.sql_sink_{what}` counted since [`count_sink_calls`].
async fn calls(pool: &PgPool, what: &str) -> i64 {
    // `last_value` is the start value until the first nextval: is_called tells them apart.
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.sql_sink_{what}_calls"
    )))
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn wait_status(pool: &PgPool, consumer: &str, status: &'static str) {
    let (pool, consumer) = (pool.clone(), consumer.to_owned());
    eventually(&format!("{consumer} to be {status}"), Duration::from_secs(60), || {
        let (pool, consumer) = (pool.clone(), consumer.clone());
        async move { shard(&pool, &consumer).await.0 == status }
    })
    .await;
}

/// 1,000 events in one transaction, so the consumer (batch size 1,000) reads them as one
/// batch; the one at `poison` divides by zero. Returns the ids in order.
async fn thousand_with_poison_at(pool: &PgPool, poison: usize) -> Vec<i64> {
    let mut tx = pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..1000 {
        let n = if i == poison { 0 } else { 1 + i as i64 % 7 };
        ids.push(
            append(&mut tx, &NewEvent::new("item", &format!("s{}", i % 13), "Item", json!({"n": n}))).await.unwrap(),
        );
    }
    tx.commit().await.unwrap();
    ids
}

/// `applies`: how many calls of `highwater.sql_sink_apply` it takes until the shard is dead.
async fn poison_in_the_middle(form: &str, statement: &str, applies: i64) {
    let db = setup(&["Item"]).await;
    sqlx::raw_sql("CREATE TABLE proj (event_id bigint PRIMARY KEY, q int NOT NULL)").execute(&db.pool).await.unwrap();
    count_sink_calls(&db.pool).await;
    let ids = thousand_with_poison_at(&db.pool, 499).await;
    apply(
        &db.pool,
        &consumer(
            "proj",
            &format!(
                "delivery: Shared\nbatchSize: 1000\nmaxAttempts: 2\nbackoff: {{initial: 50ms, max: 100ms}}\nsink:\n  sql:\n    form: {form}\n    statement: \"{statement}\""
            ),
        ),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    wait_status(&db.pool, "proj", "dead").await;
    d.terminate(Duration::from_secs(20));
    assert_eq!(calls(&db.pool, "apply").await, applies, "{form}");

    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM proj ORDER BY event_id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(applied, ids[..499].to_vec(), "exactly the 499 events before the poison one are applied");
    let (status, attempts, failing, cursor_id, error) = shard(&db.pool, "proj").await;
    assert_eq!((status.as_str(), attempts, failing, cursor_id), ("dead", 2, Some(ids[499]), ids[498]));
    let error = error.unwrap();
    assert!(error.contains("division by zero") && error.contains("22012"), "{error}");
    let delivered: i64 =
        sqlx::query_scalar("SELECT delivered_count FROM highwater.consumer_shards WHERE consumer = 'proj'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(delivered, 499);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_form_poison_in_a_1000_event_batch_applies_exactly_the_events_before_it() {
    // The batch (which names the event that failed), the 499 before it in the transaction that
    // records the failure, the retry (which fails on its first event: dead).
    poison_in_the_middle("perEvent", PER_EVENT_DIVIDE, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_form_poison_in_a_1000_event_batch_applies_exactly_the_events_before_it() {
    // The batch as a set (fails as a whole), the same events one at a time (names the event),
    // the 499 before it; the retry as a set, then one at a time. Not the whole batch as a set a
    // second time before going one at a time.
    poison_in_the_middle("set", SET_DIVIDE, 5).await;
}

/// Every column reaches the statement as stored, in both forms, including NULL tenants and
/// versions, and events appended by concurrent writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_forms_see_the_nine_columns_as_stored() {
    let db = shared(&["Item"]).await;
    let cols = "payload jsonb, id bigint PRIMARY KEY, stream_type text, stream_id text, event_type text, \
                tenant_id text, metadata jsonb, stream_version bigint, created_at timestamptz";
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE TABLE copy_each ({cols}); CREATE TABLE copy_set ({cols});")))
        .execute(&db.pool)
        .await
        .unwrap();
    let yaml = [
        consumer(
            "each",
            "delivery: Shared\nbatchSize: 300\nsink:\n  sql:\n    statement: INSERT INTO copy_each VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        ),
        consumer(
            "set",
            "delivery: Shared\nbatchSize: 300\nsink:\n  sql:\n    form: set\n    statement: INSERT INTO copy_set SELECT * FROM highwater_batch",
        ),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "d0", logs.path());
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let pool = db.pool.clone();
            tokio::spawn(async move {
                for i in 0..250i64 {
                    let mut tx = pool.begin().await.unwrap();
                    let mut e = NewEvent::new("item", &format!("w{w}"), "Item", json!({"w": w, "i": i, "s": "é\"'\\"}));
                    e.expected_version = Some(i);
                    e.tenant_id = (i % 3 == 0).then(|| format!("t{}", i % 2));
                    e.metadata = Some(json!({"correlation_id": format!("c{i}"), "n": i}));
                    append(&mut tx, &e).await.unwrap();
                    tx.commit().await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    wait_count(&db.pool, "SELECT count(*) FROM copy_each", 1000, Duration::from_secs(60)).await;
    wait_count(&db.pool, "SELECT count(*) FROM copy_set", 1000, Duration::from_secs(60)).await;
    for table in ["copy_each", "copy_set"] {
        let differ: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM (
                (SELECT payload, id, stream_type, stream_id, event_type, tenant_id, metadata, stream_version, created_at
                   FROM highwater.events EXCEPT SELECT * FROM {table})
                UNION ALL
                (SELECT * FROM {table} EXCEPT SELECT payload, id, stream_type, stream_id, event_type, tenant_id,
                        metadata, stream_version, created_at FROM highwater.events)) d"
        )))
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(differ, 0, "{table} holds exactly the stored events");
    }
}

/// The apply reads its batch as the range from the batch's first event to its last and walks the
/// batch's ids beside it: events of other types inside that range are not the batch's. Each form
/// applies exactly the consumer's events, once, the per-event form in delivery order, though
/// every batch's range holds twice as many events of another type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_other_types_inside_a_batch_are_passed_over_in_both_forms() {
    let db = shared(&["Item", "Other"]).await;
    sqlx::raw_sql(
        "CREATE TABLE each_seen (n bigserial PRIMARY KEY, event_id bigint UNIQUE NOT NULL);
         CREATE TABLE set_seen (event_id bigint PRIMARY KEY)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut items = Vec::new();
    for t in 0..3 {
        let mut tx = db.pool.begin().await.unwrap();
        for i in 0..600 {
            let kind = if i % 3 == 1 { "Item" } else { "Other" };
            let id = append(&mut tx, &NewEvent::new("item", &format!("s{t}-{}", i % 7), kind, json!({"i": i})))
                .await
                .unwrap();
            if kind == "Item" {
                items.push(id);
            }
        }
        tx.commit().await.unwrap();
    }
    let yaml = [
        consumer(
            "each",
            "delivery: Shared\nbatchSize: 70\neventTypes: [Item]\nsink: {sql: {statement: 'INSERT INTO each_seen (event_id) VALUES ($2)'}}",
        ),
        consumer(
            "set",
            "delivery: Shared\nbatchSize: 70\neventTypes: [Item]\nsink: {sql: {form: set, statement: 'INSERT INTO set_seen SELECT id FROM highwater_batch'}}",
        ),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM each_seen", 600, Duration::from_secs(60)).await;
    wait_count(&db.pool, "SELECT count(*) FROM set_seen", 600, Duration::from_secs(60)).await;
    // Both shards at rest past the last event: nothing more is coming.
    for name in ["each", "set"] {
        wait_status(&db.pool, name, "idle").await;
    }
    d.terminate(Duration::from_secs(20));
    let each: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM each_seen ORDER BY n").fetch_all(&db.pool).await.unwrap();
    assert_eq!(each, items, "per event: the Item events, each once, in delivery order");
    let set: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM set_seen ORDER BY event_id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(set, items, "set form: the Item events, each once");
}

/// `timeout` limits each event as before: a batch that runs long as a whole is committed up to
/// where the limit hit and goes on from there without a failed attempt; an event that alone
/// exceeds the limit fails, and its predecessors are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_runs_long_is_deferred_and_only_a_slow_event_fails() {
    let db = setup(&["Item"]).await;
    sqlx::raw_sql("CREATE TABLE slow (event_id bigint PRIMARY KEY)").execute(&db.pool).await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..9 {
        let sleep = if i == 8 { 2.0 } else { 0.15 };
        ids.push(append(&mut tx, &NewEvent::new("item", "a", "Item", json!({"sleep": sleep}))).await.unwrap());
    }
    tx.commit().await.unwrap();
    apply(
        &db.pool,
        &consumer(
            "slow",
            "delivery: Shared\nbatchSize: 100\nmaxAttempts: 2\nbackoff: {initial: 50ms, max: 100ms}\nsink:\n  sql:\n    timeout: 500ms\n    statement: \"INSERT INTO slow SELECT $2 FROM pg_sleep(($1->>'sleep')::float8)\"",
        ),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "d0", logs.path());
    wait_status(&db.pool, "slow", "dead").await;
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM slow ORDER BY event_id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(applied, ids[..8].to_vec(), "the eight quick events are applied, in several batches");
    let (_, attempts, failing, cursor_id, error) = shard(&db.pool, "slow").await;
    assert_eq!((attempts, failing, cursor_id), (2, Some(ids[8]), ids[7]), "only the slow event failed");
    assert!(error.as_deref().unwrap_or("").contains("statement timeout"), "{error:?}");
}

/// The set form runs under the sink's role too, and a statement that cannot run at all
/// (here: a missing table) fails on the batch's first event with the database's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_form_runs_under_the_role_and_reports_a_broken_statement() {
    let db = setup(&["Item"]).await;
    sqlx::raw_sql(
        "CREATE TABLE allowed (id bigint); CREATE TABLE secrets (id bigint);
         CREATE ROLE set_projector NOLOGIN; GRANT INSERT ON allowed TO set_projector;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let first = append(&mut tx, &NewEvent::new("item", "a", "Item", json!({}))).await.unwrap();
    append(&mut tx, &NewEvent::new("item", "a", "Item", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    let yaml = [
        consumer(
            "ok",
            "delivery: Shared\nsink: {sql: {form: set, role: set_projector, statement: 'INSERT INTO allowed SELECT id FROM highwater_batch'}}",
        ),
        consumer(
            "nosy",
            "delivery: Shared\nmaxAttempts: 1\nsink: {sql: {form: set, role: set_projector, statement: 'INSERT INTO secrets SELECT id FROM highwater_batch'}}",
        ),
        consumer(
            "broken",
            "delivery: Shared\nmaxAttempts: 1\nsink: {sql: {form: set, statement: 'INSERT INTO missing SELECT id FROM highwater_batch'}}",
        ),
    ]
    .concat();
    // Apply checks the statements against the tables then: `missing` goes after it.
    sqlx::raw_sql("CREATE TABLE missing (id bigint)").execute(&db.pool).await.unwrap();
    apply(&db.pool, &yaml).await;
    sqlx::raw_sql("DROP TABLE missing").execute(&db.pool).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "d0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM allowed", 2, Duration::from_secs(30)).await;
    wait_status(&db.pool, "nosy", "dead").await;
    wait_status(&db.pool, "broken", "dead").await;
    let (_, _, failing, _, error) = shard(&db.pool, "nosy").await;
    assert_eq!(failing, Some(first));
    assert!(error.as_deref().unwrap_or("").contains("permission denied for table secrets"), "{error:?}");
    let (_, _, failing, _, error) = shard(&db.pool, "broken").await;
    assert_eq!(failing, Some(first));
    assert!(error.as_deref().unwrap_or("").contains("relation \"missing\" does not exist"), "{error:?}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM secrets").await, 0);
}

/// A drain claims the shard once and keeps it while full batches come: the statement's session
/// functions are checked (`sql_sink_prepare`, a round trip) once per claim, not once per batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_prepares_the_statement_once_per_claim() {
    let db = setup(&["Item"]).await;
    sqlx::raw_sql("CREATE TABLE proj (event_id bigint PRIMARY KEY, q int NOT NULL)").execute(&db.pool).await.unwrap();
    count_sink_calls(&db.pool).await;
    sqlx::query(
        "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload)
         SELECT 'item', 's' || g, 'Item', jsonb_build_object('n', 1 + g % 7) FROM generate_series(1, 5000) g",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    apply(
        &db.pool,
        &consumer(
            "proj",
            &format!("delivery: Shared\nbatchSize: 500\nsink: {{sql: {{statement: \"{PER_EVENT_DIVIDE}\"}}}}"),
        ),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d-1", dir.path());
    wait_count(&db.pool, "SELECT count(*) FROM proj", 5000, Duration::from_secs(60)).await;
    d.terminate(Duration::from_secs(20));
    let (applies, prepares) = (calls(&db.pool, "apply").await, calls(&db.pool, "prepare").await);
    assert!(applies >= 10, "ten full batches applied, counted {applies}");
    assert!(prepares <= 2, "{prepares} prepares for {applies} batches");
}

/// The transaction-local settings travel with `BEGIN` (one round trip with it): the statement
/// sees its consumer, instance and `statement_timeout` in every batch, the one that applies
/// the events before a poison event included, and the cursor still moves only with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statement_sees_its_settings_in_every_batch() {
    let db = shared(&["Item"]).await;
    sqlx::raw_sql(
        "CREATE TABLE seen_settings (event_id bigint PRIMARY KEY, consumer text, instance text, timeout text)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..10 {
        let n = if i == 6 { 0 } else { 1 };
        ids.push(append(&mut tx, &NewEvent::new("item", "a", "Item", json!({"n": n}))).await.unwrap());
    }
    tx.commit().await.unwrap();
    let statement = "INSERT INTO seen_settings SELECT $2, current_setting('highwater.consumer'), \
                     current_setting('highwater.instance_id'), current_setting('statement_timeout') \
                     WHERE 1 / ($1->>'n')::int = 1";
    apply(
        &db.pool,
        &consumer(
            "settings",
            &format!(
                "delivery: Shared\nbatchSize: 4\nmaxAttempts: 1\nerrorMode: skip\nsink:\n  sql:\n    timeout: 1234ms\n    statement: \"{statement}\""
            ),
        ),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "d0", logs.path());
    let pool = db.pool.clone();
    eventually("the nine good events applied", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM seen_settings").fetch_one(&pool).await.unwrap() == 9
        }
    })
    .await;
    let rows: Vec<(i64, String, String, String)> =
        sqlx::query_as("SELECT event_id, consumer, instance, timeout FROM seen_settings ORDER BY event_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let expected: Vec<_> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 6)
        .map(|(_, id)| (*id, "settings".to_owned(), "__shared__".to_owned(), "1234ms".to_owned()))
        .collect();
    assert_eq!(rows, expected, "every applied event saw the consumer's settings");
    let (_, _, _, cursor_id, _) = shard(&db.pool, "settings").await;
    assert_eq!(cursor_id, ids[9], "the cursor moved past all ten");
    let (parked, error): (i64, String) =
        sqlx::query_as("SELECT event_id, error FROM highwater.dead_letters WHERE consumer = 'settings'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(parked == ids[6] && error.contains("division by zero"), "{parked}: {error}");
}

/// A batch naming an event that is no longer there (pruned after the dispatcher read it) fails
/// the call as a whole (its statement's error takes back what the loop applied), whichever
/// form and however far the loop got: it is not reported as a failure of one of its events,
/// which would count an attempt against an event that applied.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_whose_events_are_gone_fails_as_a_whole() {
    let db = shared(&["Item"]).await;
    sqlx::raw_sql("CREATE TABLE proj (event_id bigint PRIMARY KEY, q int NOT NULL)").execute(&db.pool).await.unwrap();
    let ids = thousand_with_poison_at(&db.pool, usize::MAX).await;
    // No min()/max() of xid8 before PostgreSQL 15: the ends in btree order instead.
    let (lo, hi): (Xid8, Xid8) = sqlx::query_as(
        "SELECT (SELECT tx_id FROM highwater.events ORDER BY tx_id LIMIT 1),
                (SELECT tx_id FROM highwater.events ORDER BY tx_id DESC LIMIT 1)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let gone = ids[999] + 1_000_000;
    for (form, statement, single) in
        [("perEvent", PER_EVENT_DIVIDE, false), ("set", SET_DIVIDE, true), ("set", SET_DIVIDE, false)]
    {
        let mut conn = db.pool.acquire().await.unwrap();
        let prepared: Option<String> = sqlx::query_scalar("SELECT highwater.sql_sink_prepare($1, $2)")
            .bind(form)
            .bind(statement)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(prepared, None, "{form}");
        // The missing event last (the per-event loop has applied the other 1,000 when it sees
        // it), then in the middle.
        let last: Vec<i64> = ids.iter().copied().chain([gone]).collect();
        let middle: Vec<i64> = ids[..500].iter().copied().chain([gone]).chain(ids[500..].iter().copied()).collect();
        for (named, before) in [(last, 1000), (middle, 500)] {
            let err = sqlx::query("SELECT * FROM highwater.sql_sink_apply($1, $2, NULL, $3, $4::xid8, $5::xid8, $6)")
                .bind(form)
                .bind(statement)
                .bind(single)
                .bind(lo)
                .bind(hi)
                .bind(&named)
                .fetch_one(&mut *conn)
                .await
                .expect_err(form);
            let expected = format!("events of the batch were not found: event {gone} is gone (the {before} before it");
            assert!(err.to_string().contains(&expected), "{form}: {err}");
        }
    }
}
