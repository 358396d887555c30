//! The generated upcast functions (issue 46, "upcasts at the cost of a function call";
//! migrations/definitions/upcast_generate.sql): each registered step becomes a function of its
//! own, `highwater.upcast` reads exactly what the dynamic EXECUTE of each expression read before,
//! the generated code follows the registry (a refused registration leaves nothing, a deleted
//! type's functions go, `migrate` regenerates what an older release registered) and leaves
//! functions that are already right alone.
mod common;

use common::*;
use highwater::{
    db,
    event_types::{Compatibility, TypeSpec, VersionSpec, apply_type},
};
use serde_json::{Value, json};
use sqlx::PgPool;

fn step(version: i32, upcast: Option<&str>) -> VersionSpec {
    VersionSpec { version, schema: None, upcast: upcast.map(str::to_owned) }
}

fn spec(name: &str, versions: Vec<VersionSpec>) -> TypeSpec {
    TypeSpec { event_type: name.into(), compatibility: Compatibility::None, versions, ..Default::default() }
}

/// The generated functions: name, whether SECURITY DEFINER, volatility, settings.
async fn generated(pool: &PgPool) -> Vec<(String, bool, String, Vec<String>)> {
    sqlx::query_as(
        "SELECT proname::text, prosecdef, provolatile::text, coalesce(proconfig, '{}')
           FROM pg_proc WHERE pronamespace = 'highwater'::regnamespace AND proname LIKE 'hw\\_upcast%'
          ORDER BY proname COLLATE \"C\"",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn names(pool: &PgPool) -> Vec<String> {
    generated(pool).await.into_iter().map(|g| g.0).collect()
}

/// What the upcasts made of a payload before 0.4.0: each expression run on its own, in the form
/// the EXECUTE ran it, under the search path of highwater.upcast.
async fn by_execute(pool: &PgPool, upcasts: &[&str], payload: &Value) -> Value {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL search_path = pg_catalog, pg_temp").execute(&mut *tx).await.unwrap();
    let mut p = payload.clone();
    for u in upcasts {
        let sql = format!("SELECT ({u})::jsonb FROM (SELECT $1::jsonb AS payload) AS e");
        p = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(&p).fetch_one(&mut *tx).await.unwrap();
    }
    p
}

async fn upcast(pool: &PgPool, t: &str, from: Option<i32>, payload: &Value, to: Option<i32>) -> Value {
    sqlx::query_scalar("SELECT highwater.upcast($1, $2, $3, $4)")
        .bind(t)
        .bind(from)
        .bind(payload)
        .bind(to)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `highwater migrate` as on an upgrade: the definitions are applied again (their checksum
/// changed), upcast_generate.sql with them.
async fn migrate_again(pool: &PgPool) {
    sqlx::query("UPDATE highwater.schema_version SET definitions_checksum = '\\x00'").execute(pool).await.unwrap();
    db::migrate(pool).await.unwrap();
}

const U2: &str = "payload || '{\"currency\": \"EUR\"}'";
// Qualified by the derived table's alias, which only the EXECUTE's form (kept) provides.
const U4: &str = "jsonb_set(e.payload, '{total}', to_jsonb(coalesce((e.payload ->> 'total')::numeric, 0) * 100))";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_step_is_a_function_and_upcast_reads_what_the_execute_of_each_expression_read() {
    let db = setup(&[]).await;
    assert_eq!(names(&db.pool).await, vec!["hw_upcasts"], "a fresh install: the dispatcher alone");

    // Steps 2 and 4 upcast, 3 does not; the type has a former name.
    let mut placed = spec("OrderPlaced", vec![step(1, None), step(2, Some(U2)), step(3, None), step(4, Some(U4))]);
    placed.aliases = vec!["OrderCreated".into()];
    apply_type(&db.pool, &placed).await.unwrap();
    // A name that needs quoting, and one too long for an identifier with the prefix.
    let odd = "shop.Order:placed-v";
    let long = format!("L{}", "x".repeat(199));
    for t in [odd, long.as_str()] {
        apply_type(&db.pool, &spec(t, vec![step(1, None), step(2, Some(U2))])).await.unwrap();
    }
    let hashed: String =
        sqlx::query_scalar("SELECT 'hw_upcast_' || md5($1) || '_v2'").bind(&long).fetch_one(&db.pool).await.unwrap();
    let mut want = vec![
        "hw_upcast_OrderPlaced_v2".to_owned(),
        "hw_upcast_OrderPlaced_v4".to_owned(),
        hashed,
        format!("hw_upcast_{odd}_v2"),
        "hw_upcasts".to_owned(),
    ];
    want.sort();
    assert_eq!(names(&db.pool).await, want);
    for (name, definer, volatility, config) in generated(&db.pool).await {
        assert!(!definer, "{name} runs with the caller's rights");
        assert_eq!(volatility, "s", "{name} is STABLE");
        assert_eq!(config, vec!["search_path=pg_catalog, pg_temp"], "{name}");
    }

    // Every stored version, to the latest and to each version, under either name.
    let payload = json!({"order_id": "a", "total": 5});
    for t in ["OrderPlaced", "OrderCreated"] {
        for from in [None, Some(1), Some(2), Some(3), Some(4)] {
            for to in [None, Some(1), Some(2), Some(3), Some(4)] {
                let f = from.unwrap_or(1);
                let upcasts: Vec<&str> = [(2, U2), (4, U4)]
                    .into_iter()
                    .filter(|(v, _)| *v > f && to.is_none_or(|to| *v <= to))
                    .map(|(_, u)| u)
                    .collect();
                assert_eq!(
                    upcast(&db.pool, t, from, &payload, to).await,
                    by_execute(&db.pool, &upcasts, &payload).await,
                    "{t} from {from:?} to {to:?}"
                );
            }
        }
    }
    let latest = upcast(&db.pool, "OrderPlaced", Some(1), &payload, None).await;
    assert_eq!(latest, json!({"order_id": "a", "total": 500, "currency": "EUR"}));
    for t in [odd, long.as_str()] {
        assert_eq!(upcast(&db.pool, t, None, &payload, None).await["currency"], "EUR", "{t}");
    }
    // A type without upcasts, and one not registered: as stored.
    assert_eq!(upcast(&db.pool, "Unknown", Some(1), &payload, None).await, payload);

    // upcast_for picks the version per type as before.
    let read: Value = sqlx::query_scalar(
        "SELECT jsonb_build_array(highwater.upcast_for('OrderCreated', 1, $1, '{\"OrderPlaced\": 2}'),
                                  highwater.upcast_for('OrderPlaced', 1, $1, '{\"*\": \"latest\"}'),
                                  highwater.upcast_for('OrderPlaced', 1, $1, '{\"*\": \"stored\"}'))",
    )
    .bind(&payload)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(read, json!([by_execute(&db.pool, &[U2], &payload).await, latest, payload]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_code_follows_the_registry_and_migrate_regenerates_it() {
    let db = setup(&["Paid"]).await;
    apply_type(&db.pool, &spec("Shipped", vec![step(1, None), step(2, Some(U2))])).await.unwrap();
    let before: Vec<(String, String)> = sqlx::query_as(
        "SELECT proname::text, xmin::text FROM pg_proc
          WHERE pronamespace = 'highwater'::regnamespace AND proname LIKE 'hw\\_upcast%' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(before.len(), 2);

    // A registration refused by its dry run (the upcast fails on a stored event) leaves no function.
    sqlx::query("SELECT highwater.append('order', '1', 'Paid', '{\"n\": 0}')").execute(&db.pool).await.unwrap();
    let refused = apply_type(
        &db.pool,
        &spec("Paid", vec![step(1, None), step(2, Some("payload || to_jsonb(1 / (payload ->> 'n')::int)"))]),
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("the upcast failed"), "{refused}");
    assert_eq!(names(&db.pool).await, vec!["hw_upcast_Shipped_v2", "hw_upcasts"]);

    // Registering again what is registered, and applying the definitions again, leave the
    // functions that are right alone (replacing one makes every session plan its callers again).
    apply_type(&db.pool, &spec("Shipped", vec![step(1, None), step(2, Some(U2))])).await.unwrap();
    migrate_again(&db.pool).await;
    let after: Vec<(String, String)> = sqlx::query_as(
        "SELECT proname::text, xmin::text FROM pg_proc
          WHERE pronamespace = 'highwater'::regnamespace AND proname LIKE 'hw\\_upcast%' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(after, before, "unchanged");

    // A database whose steps an older release registered (no generated code yet): migrate
    // generates it.
    sqlx::raw_sql(
        "DROP FUNCTION highwater.\"hw_upcast_Shipped_v2\"(jsonb);
         CREATE OR REPLACE FUNCTION highwater.hw_upcasts(p_event_type text, p_from integer, p_payload jsonb, p_to integer)
         RETURNS jsonb LANGUAGE sql AS 'SELECT $3'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(upcast(&db.pool, "Shipped", None, &json!({}), None).await, json!({}));
    migrate_again(&db.pool).await;
    assert_eq!(names(&db.pool).await, vec!["hw_upcast_Shipped_v2", "hw_upcasts"]);
    assert_eq!(upcast(&db.pool, "Shipped", None, &json!({}), None).await, json!({"currency": "EUR"}));

    // A type removed from the registry takes its functions with it.
    sqlx::raw_sql(
        "DELETE FROM highwater.event_type_versions WHERE event_type = 'Shipped';
         DELETE FROM highwater.event_types WHERE event_type = 'Shipped';",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(names(&db.pool).await, vec!["hw_upcasts"]);
    assert_eq!(upcast(&db.pool, "Shipped", None, &json!({}), None).await, json!({}));
}

/// Two transactions registering steps of different types at once (as the operator and the CLI
/// may): the second waits for the first to commit instead of failing on the dispatcher both
/// replace ("tuple concurrently updated"), and the generated code has both. Written as rows, as a
/// previous release's binary or a registrar with SQL writes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registrations_queue_and_both_are_generated() {
    let db = setup(&["A", "B"]).await;
    let register = |t: &'static str| {
        format!(
            "INSERT INTO highwater.event_type_versions (event_type, version, upcast)
             VALUES ('{t}', 2, 'payload || ''{{\"{t}\": true}}''')"
        )
    };
    let mut first = db.pool.begin().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(register("A"))).execute(&mut *first).await.unwrap();
    let pool = db.pool.clone();
    let second = tokio::spawn(async move {
        let mut tx = pool.begin().await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(register("B"))).execute(&mut *tx).await?;
        tx.commit().await
    });
    eventually("the second registration to wait for the first", std::time::Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database =
                                (SELECT oid FROM pg_database WHERE datname = current_database()))",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    })
    .await;
    first.commit().await.unwrap();
    second.await.unwrap().expect("the second registration commits");
    assert_eq!(names(&db.pool).await, vec!["hw_upcast_A_v2", "hw_upcast_B_v2", "hw_upcasts"]);
    for t in ["A", "B"] {
        assert_eq!(upcast(&db.pool, t, None, &json!({}), None).await, json!({ t: true }), "{t}");
    }
}
