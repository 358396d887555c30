//! Event types with versions (issue 36, part 2): the registry API (`event_types::apply_type`),
//! appends of a version and of the latest, the compatibility check at registration, upcasts
//! (dry run at registration, applied on read for consumers that ask for the latest version),
//! aliases, and the seven-argument append of binaries that know no versions.
mod common;

use common::*;
use highwater::{
    Error, NewEvent, append,
    event_types::{self, Compatibility, TypeSpec, VersionCount, VersionSpec, apply_type, version_counts},
    events::append_version,
};
use serde_json::{Value, json};
use sqlx::PgPool;

fn v(version: i32, schema: Value, upcast: Option<&str>) -> VersionSpec {
    VersionSpec { version, schema: Some(schema), upcast: upcast.map(str::to_owned) }
}

fn spec(name: &str, versions: Vec<VersionSpec>) -> TypeSpec {
    TypeSpec { event_type: name.into(), versions, ..Default::default() }
}

fn v1() -> Value {
    json!({"type": "object", "required": ["order_id"], "additionalProperties": false,
           "properties": {"order_id": {"type": "string"}, "total": {"type": "number"}}})
}

/// Version 2: a required currency, given to stored version-1 events by the upcast.
fn v2() -> Value {
    json!({"type": "object", "required": ["order_id", "currency"], "additionalProperties": false,
           "properties": {"order_id": {"type": "string"}, "total": {"type": "number"},
                          "currency": {"type": "string", "enum": ["EUR", "USD"]}}})
}

const UPCAST: &str = r#"jsonb_set(payload, '{currency}', '"EUR"')"#;

async fn ev(pool: &PgPool, t: &str, payload: Value) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("order", "1", t, payload)).await.unwrap();
    tx.commit().await.unwrap();
    id
}

async fn ev_version(pool: &PgPool, t: &str, payload: Value, version: i32) -> Result<i64, Error> {
    let mut tx = pool.begin().await.unwrap();
    let id = append_version(&mut tx, &NewEvent::new("order", "1", t, payload), version).await?;
    tx.commit().await.unwrap();
    Ok(id)
}

async fn stored_version(pool: &PgPool, id: i64) -> Option<i32> {
    sqlx::query_scalar("SELECT schema_version FROM highwater.events WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Everything the registry holds, to compare before and after a refusal.
async fn registry(pool: &PgPool) -> String {
    sqlx::query_scalar(
        "SELECT concat_ws(' | ',
                (SELECT string_agg(concat_ws(',', event_type, json_schema::text, description, compatibility,
                                             latest_version), ';' ORDER BY event_type) FROM highwater.event_types),
                (SELECT string_agg(concat_ws(',', event_type, version, json_schema::text, upcast), ';'
                                   ORDER BY event_type, version) FROM highwater.event_type_versions),
                (SELECT string_agg(alias || '>' || event_type, ';' ORDER BY alias) FROM highwater.event_type_aliases))",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

fn refusal(e: Error) -> (String, String) {
    match e {
        Error::Refused(r) => (r.problem, r.fix.unwrap_or_default()),
        e => panic!("expected a refusal, got {e:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_type_registers_missing_versions_in_order_and_is_idempotent() {
    let db = shared(&[]).await;
    let s = spec("OrderPlaced", vec![v(1, v1(), None)]);
    let a = apply_type(&db.pool, &s).await.unwrap();
    assert_eq!((a.registered.clone(), a.latest), (vec![1], 1));
    let again = apply_type(&db.pool, &s).await.unwrap();
    assert_eq!((again.registered, again.latest), (vec![], 1), "applying the same spec again changes nothing");

    // Stored events of version 1, then version 2 with its upcast.
    let old = ev(&db.pool, "OrderPlaced", json!({"order_id": "a", "total": 5})).await;
    assert_eq!(stored_version(&db.pool, old).await, None, "a type with only version 1 records NULL (= 1)");
    let s2 = spec("OrderPlaced", vec![v(1, v1(), None), v(2, v2(), Some(UPCAST))]);
    let a = apply_type(&db.pool, &s2).await.unwrap();
    assert_eq!((a.registered, a.latest), (vec![2], 2));
    assert_eq!(apply_type(&db.pool, &s2).await.unwrap().registered, Vec::<i32>::new());

    // The registry row says the latest schema: what binaries without versions validate against.
    let (schema, latest): (Value, Option<i32>) = sqlx::query_as(
        "SELECT json_schema, latest_version FROM highwater.event_types WHERE event_type = 'OrderPlaced'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((schema, latest), (v2(), Some(2)));

    let t = event_types::get(&db.pool, "OrderPlaced").await.unwrap().unwrap();
    assert_eq!(t.spec().versions, s2.versions);
    assert_eq!(t.compatibility, Compatibility::Backward, "the default mode");

    // Three versions at once on a fresh type.
    let fresh = spec(
        "Fresh",
        vec![
            v(1, json!({"type": "object"}), None),
            v(2, json!({"type": "object"}), None),
            v(3, json!({"type": "object"}), None),
        ],
    );
    assert_eq!(apply_type(&db.pool, &fresh).await.unwrap().registered, vec![1, 2, 3]);

    let counts = version_counts(&db.pool, "OrderPlaced").await.unwrap();
    assert_eq!(counts, vec![VersionCount { version: 1, events: 1 }, VersionCount { version: 2, events: 0 }]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_type_refuses_changed_versions_gaps_and_bad_schemas_and_changes_nothing() {
    let db = shared(&[]).await;
    apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None)])).await.unwrap();
    let before = registry(&db.pool).await;

    // A registered version's schema changed.
    let changed = spec("OrderPlaced", vec![v(1, json!({"type": "object"}), None)]);
    let (p, fix) = refusal(apply_type(&db.pool, &changed).await.unwrap_err());
    assert!(p.contains("version 1 of \"OrderPlaced\" is registered with a different schema"), "{p}");
    assert!(fix.contains("--version 2"), "{fix}");

    // A gap in the sequence.
    let gap = spec("OrderPlaced", vec![v(1, v1(), None), v(3, v2(), None)]);
    let (p, fix) = refusal(apply_type(&db.pool, &gap).await.unwrap_err());
    assert!(p.contains("version 2 is missing"), "{p}");
    assert!(fix.contains("declare version 2"), "{fix}");

    // Not a JSON Schema.
    let bad = spec("OrderPlaced", vec![v(1, v1(), None), v(2, json!({"type": "banana"}), None)]);
    let (p, _) = refusal(apply_type(&db.pool, &bad).await.unwrap_err());
    assert!(p.contains("version 2 of \"OrderPlaced\"") && p.contains("not a valid JSON Schema"), "{p}");

    // An upcast on version 1, and one that is not a single expression.
    let up1 = spec("Other", vec![v(1, v1(), Some("payload"))]);
    assert!(
        refusal(apply_type(&db.pool, &up1).await.unwrap_err()).0.contains("version 1 of \"Other\" declares an upcast")
    );
    let two = spec("OrderPlaced", vec![v(1, v1(), None), v(2, v2(), Some("payload; DROP TABLE highwater.events"))]);
    assert!(refusal(apply_type(&db.pool, &two).await.unwrap_err()).0.contains("not one SQL expression"));
    let nonsense = spec("OrderPlaced", vec![v(1, v1(), None), v(2, v2(), Some("payload ->> "))]);
    let (p, fix) = refusal(apply_type(&db.pool, &nonsense).await.unwrap_err());
    assert!(p.contains("is not a SQL expression over payload"), "{p}");
    assert!(fix.contains("jsonb_set"), "{fix}");

    assert_eq!(registry(&db.pool).await, before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incompatible_version_is_refused_naming_the_path_and_nothing_changes() {
    let db = shared(&[]).await;
    apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None)])).await.unwrap();
    ev(&db.pool, "OrderPlaced", json!({"order_id": "a", "total": 5})).await;
    let before = registry(&db.pool).await;

    // Backward (the default): total narrowed from number to integer, a new required property
    // without an upcast.
    let mut narrowed = v1();
    narrowed["properties"]["total"] = json!({"type": "integer"});
    narrowed["required"] = json!(["order_id", "customer"]);
    narrowed["properties"]["customer"] = json!({"type": "string"});
    let (p, fix) = refusal(
        apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None), v(2, narrowed.clone(), None)]))
            .await
            .unwrap_err(),
    );
    assert!(p.contains("version 2 of \"OrderPlaced\" is not backward compatible"), "{p}");
    assert!(p.contains("$.properties.total"), "{p}");
    assert!(p.contains("$.required.customer"), "{p}");
    assert!(fix.contains("--upcast") && fix.contains("--compatibility none"), "{fix}");
    assert_eq!(registry(&db.pool).await, before, "nothing changed");

    // Forward: a removed property under a closed reader.
    let mut fwd = spec("Fwd", vec![v(1, v1(), None)]);
    fwd.compatibility = Compatibility::Forward;
    apply_type(&db.pool, &fwd).await.unwrap();
    let mut wider = v1();
    wider["properties"]["note"] = json!({"type": "string"});
    fwd.versions.push(v(2, wider, None));
    let (p, _) = refusal(apply_type(&db.pool, &fwd).await.unwrap_err());
    assert!(p.contains("not forward compatible") && p.contains("$.properties.note"), "{p}");

    // Mode none accepts it.
    fwd.compatibility = Compatibility::None;
    assert_eq!(apply_type(&db.pool, &fwd).await.unwrap().registered, vec![2]);

    // Transitive: version 3 compatible with 2 but not with 1.
    let mut t = spec(
        "Trans",
        vec![v(
            1,
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}),
            None,
        )],
    );
    t.compatibility = Compatibility::ForwardTransitive;
    t.versions.push(v(
        2,
        json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}, "additionalProperties": false}),
        None,
    ));
    // Forward: 2's payloads must fit 1 — a null a does not.
    let (p, _) = refusal(apply_type(&db.pool, &t).await.unwrap_err());
    assert!(p.contains("$.properties.a"), "{p}");
    t.compatibility = Compatibility::BackwardTransitive;
    apply_type(&db.pool, &t).await.unwrap();
    // 3 narrows back to string: backward from 2 fails (null), as does transitive.
    t.versions.push(v(
        3,
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}),
        None,
    ));
    let (p, _) = refusal(apply_type(&db.pool, &t).await.unwrap_err());
    assert!(p.contains("not backward_transitive compatible") && p.contains("version 2"), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_content_model_is_checked_against_stored_events_not_refused_blindly() {
    let db = shared(&[]).await;
    let open = |extra: Option<Value>| {
        let mut s = json!({"type": "object", "properties": {"order_id": {"type": "string"}}});
        if let Some(e) = extra {
            s["properties"]["discount"] = e;
        }
        s
    };
    apply_type(&db.pool, &spec("Open", vec![v(1, open(None), None)])).await.unwrap();
    ev(&db.pool, "Open", json!({"order_id": "a"})).await;
    // An added optional property under the open content model (Confluent #1458): the stored
    // events have no conflicting `discount`, so it registers, with a note saying why.
    let s2 = spec("Open", vec![v(1, open(None), None), v(2, open(Some(json!({"type": "number"}))), None)]);
    let a = apply_type(&db.pool, &s2).await.unwrap();
    assert_eq!(a.registered, vec![2]);
    assert!(
        a.notes.iter().any(|n| n.contains("open content model") && n.contains("$.properties.discount")),
        "{:?}",
        a.notes
    );

    // The same change where a stored event holds the property with another type is refused,
    // naming that event.
    apply_type(&db.pool, &spec("Open2", vec![v(1, open(None), None)])).await.unwrap();
    let bad = ev(&db.pool, "Open2", json!({"order_id": "a", "discount": "10%"})).await;
    let before = registry(&db.pool).await;
    let s2 = spec("Open2", vec![v(1, open(None), None), v(2, open(Some(json!({"type": "number"}))), None)]);
    let (p, fix) = refusal(apply_type(&db.pool, &s2).await.unwrap_err());
    assert!(p.contains(&format!("stored event {bad}")) && p.contains("discount"), "{p}");
    assert!(fix.contains(&format!("event {bad}")), "{fix}");
    assert_eq!(registry(&db.pool).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upcast_that_fails_on_a_stored_event_is_refused_at_registration_naming_it() {
    let db = shared(&[]).await;
    apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None)])).await.unwrap();
    ev(&db.pool, "OrderPlaced", json!({"order_id": "a", "total": 5})).await;
    let odd = ev(&db.pool, "OrderPlaced", json!({"order_id": "b", "total": 5.5})).await;
    let before = registry(&db.pool).await;
    // Raises on the second event (5.5 is not an integer).
    let raising = r#"jsonb_set(payload, '{cents}', to_jsonb(((payload->>'total')::int * 100)))"#;
    let mut with_cents = v1();
    with_cents["properties"]["cents"] = json!({"type": "integer"});
    let s = spec("OrderPlaced", vec![v(1, v1(), None), v(2, with_cents, Some(raising))]);
    let (p, fix) = refusal(apply_type(&db.pool, &s).await.unwrap_err());
    assert!(p.contains(&format!("stored event {odd}")) && p.contains("the upcast failed"), "{p}");
    assert!(fix.starts_with("fix the upcast"), "{fix}");
    // An upcast whose output does not fit the new schema: currency "GBP" is not in the enum.
    let s =
        spec("OrderPlaced", vec![v(1, v1(), None), v(2, v2(), Some(r#"jsonb_set(payload, '{currency}', '"GBP"')"#))]);
    let (p, _) = refusal(apply_type(&db.pool, &s).await.unwrap_err());
    assert!(p.contains("stored event") && p.contains("fails the schema of version 2") && p.contains("currency"), "{p}");
    assert_eq!(registry(&db.pool).await, before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_name_a_version_or_get_the_latest_and_the_version_is_recorded() {
    let db = shared(&[]).await;
    apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None), v(2, v2(), Some(UPCAST))])).await.unwrap();

    // The latest (seven-argument append, as binaries of 0.4.0 call it): checked against v2.
    let latest = ev(&db.pool, "OrderPlaced", json!({"order_id": "a", "currency": "USD"})).await;
    assert_eq!(stored_version(&db.pool, latest).await, Some(2));
    let mut tx = db.pool.begin().await.unwrap();
    let e = append(&mut tx, &NewEvent::new("order", "1", "OrderPlaced", json!({"order_id": "a"}))).await.unwrap_err();
    assert!(matches!(e, Error::InvalidPayload { .. }), "the latest schema requires currency: {e:?}");
    drop(tx);
    // With an expected stream version (the other path of append): also recorded.
    let mut tx = db.pool.begin().await.unwrap();
    let mut n = NewEvent::new("order", "9", "OrderPlaced", json!({"order_id": "z", "currency": "EUR"}));
    n.expected_version = Some(0);
    let versioned = append(&mut tx, &n).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(stored_version(&db.pool, versioned).await, Some(2));

    // A named earlier version: its own schema, recorded.
    let old = ev_version(&db.pool, "OrderPlaced", json!({"order_id": "b", "total": 1}), 1).await.unwrap();
    assert_eq!(stored_version(&db.pool, old).await, Some(1));
    let e = ev_version(&db.pool, "OrderPlaced", json!({"order_id": "b", "currency": "EUR"}), 1).await.unwrap_err();
    assert!(matches!(&e, Error::InvalidPayload { message, .. } if message.contains("currency")), "{e:?}");
    // The latest named explicitly.
    let named = ev_version(&db.pool, "OrderPlaced", json!({"order_id": "c", "currency": "EUR"}), 2).await.unwrap();
    assert_eq!(stored_version(&db.pool, named).await, Some(2));
    // An unknown version: HW004, with the fix.
    match ev_version(&db.pool, "OrderPlaced", json!({}), 3).await.unwrap_err() {
        Error::UnknownEventType { message, hint } => {
            assert!(message.contains("has no version 3 (its latest is 2)"), "{message}");
            assert!(hint.unwrap_or_default().contains("--version 3"));
        }
        e => panic!("{e:?}"),
    }
    // The eight-argument form from SQL, the version NULL: the latest.
    let id: i64 = sqlx::query_scalar(
        "SELECT highwater.append('order', '2', 'OrderPlaced', '{\"order_id\": \"d\", \"currency\": \"EUR\"}', NULL, NULL, NULL, NULL)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(stored_version(&db.pool, id).await, Some(2));
    // The seven-argument form with the old named arguments still resolves (no ambiguity).
    let id: i64 = sqlx::query_scalar(
        "SELECT highwater.append('order', '3', 'OrderPlaced', '{\"order_id\": \"e\", \"currency\": \"EUR\"}', p_expected_version => 0)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(stored_version(&db.pool, id).await, Some(2));

    let counts = version_counts(&db.pool, "OrderPlaced").await.unwrap();
    assert_eq!(counts, vec![VersionCount { version: 1, events: 1 }, VersionCount { version: 2, events: 5 }]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_is_idempotent_and_a_different_schema_needs_a_version() {
    let db = shared(&[]).await;
    event_types::register(&db.pool, "OrderPlaced", Some(&v1()), Some("placed")).await.unwrap();
    event_types::register(&db.pool, "OrderPlaced", Some(&v1()), None).await.unwrap();
    event_types::register(&db.pool, "OrderPlaced", None, None).await.unwrap();
    let t = event_types::get(&db.pool, "OrderPlaced").await.unwrap().unwrap();
    assert_eq!((t.latest, t.versions[0].schema.clone(), t.description), (1, Some(v1()), Some("placed".into())));
    let before = registry(&db.pool).await;
    let (p, fix) = refusal(event_types::register(&db.pool, "OrderPlaced", Some(&v2()), None).await.unwrap_err());
    assert!(p.contains("with a different schema"), "{p}");
    assert!(fix.contains("--version 2"), "{fix}");
    assert_eq!(registry(&db.pool).await, before);
    let a =
        event_types::register_version(&db.pool, "OrderPlaced", 2, Some(&v2()), Some(UPCAST), None, None).await.unwrap();
    assert_eq!((a.registered, a.latest), (vec![2], 2));
    // Again: idempotent. Version 4: refused with the next version as fix.
    event_types::register_version(&db.pool, "OrderPlaced", 2, Some(&v2()), Some(UPCAST), None, None).await.unwrap();
    let (p, fix) = refusal(
        event_types::register_version(&db.pool, "OrderPlaced", 4, Some(&v2()), None, None, None).await.unwrap_err(),
    );
    assert!(p.contains("at version 2: the next is 3"), "{p}");
    assert!(fix.contains("--version 3"), "{fix}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_registered_by_a_binary_without_versions_is_version_one() {
    let db = shared(&[]).await;
    // What 0.4.0's register does: the registry row only.
    sqlx::query("INSERT INTO highwater.event_types (event_type, json_schema) VALUES ('Legacy', $1)")
        .bind(sqlx::types::Json(v1()))
        .execute(&db.pool)
        .await
        .unwrap();
    let id = ev(&db.pool, "Legacy", json!({"order_id": "a"})).await;
    assert_eq!(stored_version(&db.pool, id).await, None);
    let t = event_types::get(&db.pool, "Legacy").await.unwrap().unwrap();
    assert_eq!((t.latest, t.versions.len()), (1, 1));
    let a = apply_type(&db.pool, &spec("Legacy", vec![v(1, v1(), None), v(2, v2(), Some(UPCAST))])).await.unwrap();
    assert_eq!(a.registered, vec![2]);
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM highwater.event_type_versions WHERE event_type = 'Legacy'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows, 2, "version 1's row was written");
}

/// The payloads a table of a SQL sink holds, by event id.
async fn rows(pool: &PgPool, table: &str) -> Vec<(i64, String, Value)> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT id, event_type, payload FROM {table} ORDER BY id")))
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_that_ask_for_the_latest_version_read_upcast_payloads_and_a_rewind_replays_through_them() {
    let db = setup(&["Other"]).await;
    // The old name, with a stored event, renamed later: consumers of the new name read it.
    apply_type(&db.pool, &spec("OrderCreated", vec![v(1, v1(), None)])).await.unwrap();
    let created = ev(&db.pool, "OrderCreated", json!({"order_id": "old", "total": 1})).await;
    apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None)])).await.unwrap();
    let e1 = ev(&db.pool, "OrderPlaced", json!({"order_id": "a", "total": 5})).await;
    let e2 = ev_version(&db.pool, "OrderPlaced", json!({"order_id": "b"}), 1).await.unwrap();
    event_types::rename(&db.pool, "OrderCreated", "OrderPlaced").await.unwrap();
    apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None), v(2, v2(), Some(UPCAST))])).await.unwrap();
    let e3 = ev(&db.pool, "OrderPlaced", json!({"order_id": "c", "currency": "USD"})).await;
    ev(&db.pool, "Other", json!({})).await; // never delivered: another type
    for t in ["latest_rows", "stored_rows", "set_rows"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {t} (id bigint PRIMARY KEY, event_type text, payload jsonb)"
        )))
        .execute(&db.pool)
        .await
        .unwrap();
    }
    // The sinks that upcast run their statements under a role without rights on the schema
    // highwater: the upcasts run before the role is taken.
    sqlx::raw_sql(
        "CREATE ROLE projector NOLOGIN;
         GRANT SELECT, INSERT, UPDATE ON latest_rows, set_rows TO projector;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("latest.jsonl");
    let upsert = "ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload";
    apply(
        &db.pool,
        &[
            consumer(
                "latest",
                &format!(
                    "delivery: Shared\neventTypes: [OrderPlaced]\neventVersions: latest\n\
                     sink: {{sql: {{role: projector, statement: \"INSERT INTO latest_rows VALUES ($2, $5, $1) {upsert}\"}}}}"
                ),
            ),
            consumer(
                "stored",
                "delivery: Shared\neventTypes: [OrderPlaced]\n\
                 sink: {sql: {statement: \"INSERT INTO stored_rows VALUES ($2, $5, $1)\"}}",
            ),
            consumer(
                "set",
                "delivery: Shared\neventTypes: [OrderPlaced]\neventVersions: {OrderPlaced: latest}\n\
                 sink: {sql: {form: set, role: projector, statement: \"INSERT INTO set_rows SELECT id, event_type, payload FROM highwater_batch\"}}",
            ),
            consumer(
                "log",
                &format!(
                    "delivery: Shared\neventTypes: [OrderPlaced]\neventVersions: latest\nsink: {{log: {{target: '{}'}}}}",
                    log.display()
                ),
            ),
        ]
        .join(""),
    )
    .await;
    let d = Dispatcher::start(&db.url, "p0", dir.path());
    let wait = std::time::Duration::from_secs(60);
    wait_count(&db.pool, "SELECT count(*) FROM latest_rows", 4, wait).await;
    wait_count(&db.pool, "SELECT count(*) FROM stored_rows", 4, wait).await;
    wait_count(&db.pool, "SELECT count(*) FROM set_rows", 4, wait).await;
    let eur = |order: &str, total: Option<i64>| {
        let mut p = json!({"order_id": order, "currency": "EUR"});
        if let Some(t) = total {
            p["total"] = json!(t);
        }
        p
    };
    let latest = vec![
        (created, "OrderCreated".to_owned(), eur("old", Some(1))),
        (e1, "OrderPlaced".to_owned(), eur("a", Some(5))),
        (e2, "OrderPlaced".to_owned(), eur("b", None)),
        (e3, "OrderPlaced".to_owned(), json!({"order_id": "c", "currency": "USD"})),
    ];
    assert_eq!(rows(&db.pool, "latest_rows").await, latest, "per-event SQL sink: every event in the latest shape");
    assert_eq!(rows(&db.pool, "set_rows").await, latest, "set SQL sink: the same through highwater_batch");
    let stored = rows(&db.pool, "stored_rows").await;
    assert_eq!(stored[0].2, json!({"order_id": "old", "total": 1}), "a consumer without eventVersions reads as stored");
    assert_eq!(stored[2].2, json!({"order_id": "b"}));

    // The log sink (what webhooks, brokers and SSE get from the same read): upcast payloads.
    let log2 = log.clone();
    eventually("four lines in the log sink", wait, || {
        let log = log2.clone();
        async move { std::fs::read_to_string(&log).unwrap_or_default().lines().count() >= 4 }
    })
    .await;
    let lines: Vec<Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let payloads: Vec<Value> = lines.iter().map(|l| l["event"]["payload"].clone()).collect();
    assert_eq!(payloads, latest.iter().map(|r| r.2.clone()).collect::<Vec<_>>(), "{lines:#?}");

    // Version 3 with another upcast; a rewind to the start replays through both.
    let mut v3 = v2();
    v3["properties"]["channel"] = json!({"type": "string"});
    let applied = apply_type(
        &db.pool,
        &spec(
            "OrderPlaced",
            vec![v(1, v1(), None), v(2, v2(), Some(UPCAST)), v(3, v3, Some(r#"payload || '{"channel": "web"}'"#))],
        ),
    )
    .await
    .unwrap();
    assert_eq!(applied.registered, vec![3]);
    highwater::ops::rewind(
        &db.pool,
        "latest",
        None,
        highwater::ops::RewindTo::Earliest,
        &highwater::ops::Audit::by("test"),
    )
    .await
    .unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM latest_rows WHERE payload ? 'channel'", 4, wait).await;
    let replayed = rows(&db.pool, "latest_rows").await;
    assert_eq!(replayed[0].2, json!({"order_id": "old", "total": 1, "currency": "EUR", "channel": "web"}));
    assert_eq!(replayed[3].2, json!({"order_id": "c", "currency": "USD", "channel": "web"}));
    d.terminate(std::time::Duration::from_secs(10));

    // The stored events never changed.
    let p: Value = sqlx::query_scalar("SELECT payload FROM highwater.events WHERE id = $1")
        .bind(created)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(p, json!({"order_id": "old", "total": 1}));
}

fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cli_ok(url: &str, args: &[&str]) -> String {
    let (code, out, err) = cli(url, args);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
    out
}

/// A refusal on stderr: `error: …` then `  fix: …`, exit status 1.
fn cli_refused(url: &str, args: &[&str], problem: &str, fix: &str) {
    let (code, out, err) = cli(url, args);
    assert_eq!(code, 1, "{args:?}: {out}{err}");
    assert!(err.contains(problem), "{args:?}: expected {problem:?} in {err}");
    let fix_line = err.lines().find(|l| l.trim_start().starts_with("fix:")).unwrap_or_default();
    assert!(fix_line.contains(fix), "{args:?}: expected a fix line with {fix:?} in {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_registers_versions_appends_lists_shows_reads_latest_and_refuses_bad_input_with_a_fix() {
    let db = shared(&[]).await;
    let url = &db.url;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p.display().to_string()
    };
    let (f1, f2) = (file("v1.json", &v1()), file("v2.json", &v2()));
    cli_ok(url, &["event-types", "register", "OrderPlaced", "--schema", &f1]);
    cli_ok(url, &["event-types", "register", "OrderPlaced", "--schema", &f1]); // idempotent
    cli_ok(url, &["event-types", "register", "OrderPlaced"]); // idempotent, keeps the schema
    let append = |payload: &str, extra: &[&str]| {
        let mut a = vec!["events", "append", "--stream-type", "order", "--stream-id", "7", "--type", "OrderPlaced"];
        a.extend(["--payload", payload]);
        a.extend_from_slice(extra);
        cli(url, &a)
    };
    assert_eq!(append(r#"{"order_id": "a", "total": 3}"#, &[]).0, 0);
    cli_refused(
        url,
        &["event-types", "register", "OrderPlaced", "--schema", &f2],
        "with a different schema",
        "--version 2",
    );
    // Bad input, each refused with a fix, nothing changed.
    let before = registry(&db.pool).await;
    let bad = file("bad.json", &json!({"type": "banana"}));
    cli_refused(
        url,
        &["event-types", "register", "OrderPlaced", "--version", "2", "--schema", &bad],
        "not a valid JSON Schema",
        "",
    );
    cli_refused(
        url,
        &[
            "event-types",
            "register",
            "OrderPlaced",
            "--version",
            "2",
            "--schema",
            &f2,
            "--upcast",
            "jsonb_set(payload, '{currency}', to_jsonb(1 / ((payload->>'total')::int - 3)))",
        ],
        "division by zero",
        "fix the upcast",
    );
    cli_refused(
        url,
        &["event-types", "register", "OrderPlaced", "--version", "2", "--schema", &f2],
        "$.required.currency",
        "--upcast",
    );
    cli_refused(
        url,
        &["event-types", "register", "OrderPlaced", "--version", "3", "--schema", &f2],
        "the next is 2",
        "--version 2",
    );
    cli_refused(
        url,
        &["event-types", "register", "OrderPlaced", "--compatibility", "sideways"],
        "unknown compatibility mode",
        "backward_transitive",
    );
    assert_eq!(registry(&db.pool).await, before, "nothing changed");

    let out = cli_ok(
        url,
        &[
            "event-types",
            "register",
            "OrderPlaced",
            "--version",
            "2",
            "--schema",
            &f2,
            "--upcast",
            UPCAST,
            "--description",
            "placed",
        ],
    );
    assert!(out.contains("version 2 registered (latest 2)"), "{out}");
    assert_eq!(append(r#"{"order_id": "b", "currency": "USD"}"#, &[]).0, 0);
    assert_eq!(append(r#"{"order_id": "c"}"#, &["--schema-version", "1"]).0, 0);
    let (code, _, err) = append(r#"{"order_id": "d"}"#, &["--schema-version", "5"]);
    assert_eq!(code, 1);
    assert!(err.contains("has no version 5 (its latest is 2)") && err.contains("fix:"), "{err}");

    let list = cli_ok(url, &["event-types", "list"]);
    let line = list.lines().find(|l| l.starts_with("OrderPlaced")).unwrap();
    assert!(
        line.contains("v2") && line.contains("backward") && line.contains("schema") && line.contains("placed"),
        "{list}"
    );
    let show = cli_ok(url, &["event-types", "show", "OrderPlaced"]);
    assert!(show.contains("version 1 (2 stored events)") && show.contains("version 2 (1 stored events)"), "{show}");
    assert!(show.contains("upcast from 1: jsonb_set"), "{show}");
    cli_refused(url, &["event-types", "show", "Nope"], "is not registered", "event-types list");

    let read = |latest: bool| {
        let mut a = vec!["events", "read", "--stream", "order/7", "-o", "json"];
        if latest {
            a.push("--latest");
        }
        let out = cli_ok(url, &a);
        serde_json::from_str::<Vec<Value>>(&out).unwrap().into_iter().map(|e| e["payload"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(read(false)[0], json!({"order_id": "a", "total": 3}));
    assert_eq!(
        read(true),
        vec![
            json!({"order_id": "a", "total": 3, "currency": "EUR"}),
            json!({"order_id": "b", "currency": "USD"}),
            json!({"order_id": "c", "currency": "EUR"})
        ]
    );

    // Rename: the old name's events are read by consumers of the new one.
    cli_ok(url, &["event-types", "register", "OrderMade"]);
    let out = cli_ok(url, &["event-types", "rename", "OrderMade", "OrderPlaced"]);
    assert!(out.contains("OrderMade is a former name of OrderPlaced"), "{out}");
    let show = cli_ok(url, &["event-types", "show", "OrderPlaced"]);
    assert!(show.contains("former names:  OrderMade"), "{show}");
    for help in [
        &["event-types", "register", "--help"][..],
        &["event-types", "show", "--help"],
        &["event-types", "rename", "--help"],
    ] {
        let out = cli_ok(url, help);
        assert!(out.len() > 100, "{help:?}: {out}");
    }
}

/// `event-types apply -f`: the operator's `EventType` documents applied outside Kubernetes, a
/// file as one transaction (a refused document leaves the registry as it was, even for the
/// documents before it), aliases and upcasts as the resource declares them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_applies_event_type_documents_of_a_file_in_one_transaction() {
    let db = shared(&[]).await;
    let url = &db.url;
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/order-event-types.yaml");
    let out = cli_ok(url, &["event-types", "apply", "-f", examples]);
    assert!(out.contains("event type OrderPlaced: version 1 registered"), "{out}");
    let once = registry(&db.pool).await;
    let out = cli_ok(url, &["event-types", "apply", "-f", examples]);
    assert!(out.contains("OrderPlaced already registered as given"), "idempotent: {out}");
    assert_eq!(registry(&db.pool).await, once);

    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let doc = |name: &str, spec: &str| {
        format!("apiVersion: highwater.dev/v1alpha1\nkind: EventType\nmetadata: {{name: {name}}}\nspec:\n{spec}")
    };
    let (s1, s2) = (v1().to_string(), v2().to_string());
    let shipped = doc(
        "shipped",
        &format!(
            "  eventType: OrderShipped\n  aliases: [OrderSent]\n  versions:\n    - {{version: 1, schema: {s1}}}\n"
        ),
    );
    // A valid first document, a second whose version 2 breaks version 1's readers (a required
    // property with no upcast): refused naming the second document, and the first not applied.
    let broken = doc(
        "paid",
        &format!(
            "  eventType: OrderPaid\n  versions:\n    - {{version: 1, schema: {s1}}}\n    - {{version: 2, schema: {s2}}}\n"
        ),
    );
    let consumer = consumer("beside", "delivery: Shared\nsink: {log: {}}").trim_start_matches("---\n").to_owned();
    let bad = write("bad.yaml", format!("{shipped}---\n{consumer}---\n{broken}"));
    let before = registry(&db.pool).await;
    cli_refused(url, &["event-types", "apply", "-f", &bad], "bad.yaml (document 3): ", "upcast");
    assert_eq!(registry(&db.pool).await, before, "nothing of the file applied");

    // With the upcast the same file applies; the consumer document is passed over and said so.
    let fixed = broken.replace(&format!("schema: {s2}}}"), &format!("schema: {s2}, upcast: {UPCAST:?}}}"));
    let good = write("good.yaml", format!("{shipped}---\n{consumer}---\n{fixed}"));
    let out = cli_ok(url, &["event-types", "apply", "-f", &good]);
    assert!(out.contains("event type OrderPaid: version 1, 2 registered (latest 2)"), "{out}");
    assert!(out.contains("passed over 1 EventConsumer document"), "{out}");
    let alias: String =
        sqlx::query_scalar("SELECT event_type FROM highwater.event_type_aliases WHERE alias = 'OrderSent'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(alias, "OrderShipped");
    let upcast: Option<String> = sqlx::query_scalar(
        "SELECT upcast FROM highwater.event_type_versions WHERE event_type = 'OrderPaid' AND version = 2",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(upcast.as_deref(), Some(UPCAST));
    assert!(
        cli(url, &["event-types", "apply", "-f", &write("none.yaml", consumer.clone())]).2.contains("no EventType")
    );
}

/// What an upcast costs on read, and what reading as stored costs, over the same events
/// (printed; `cargo test -p highwater --test event_versions -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_the_cost_of_reading_upcast_payloads() {
    let db = shared(&[]).await;
    apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None)])).await.unwrap();
    sqlx::query(
        "SELECT highwater.append('order', g::text, 'OrderPlaced', jsonb_build_object('order_id', g::text, 'total', g))
           FROM generate_series(1, 20000) g",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    apply_type(&db.pool, &spec("OrderPlaced", vec![v(1, v1(), None), v(2, v2(), Some(UPCAST))])).await.unwrap();
    for (what, sql) in [
        ("as stored", "SELECT count(e.payload) FROM highwater.events e"),
        (
            "upcast_for, latest (one step)",
            "SELECT count(highwater.upcast_for(e.event_type, e.schema_version, e.payload, '{\"*\": \"latest\"}')) FROM highwater.events e",
        ),
        (
            "upcast_for, stored (no step)",
            "SELECT count(highwater.upcast_for(e.event_type, e.schema_version, e.payload, '{\"*\": \"stored\"}')) FROM highwater.events e",
        ),
    ] {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            sqlx::query(sql).execute(&db.pool).await.unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("{what:<32} {:>8.2} µs per event", best * 1e6 / 20000.0);
    }
}

#[test]
fn event_versions_in_a_consumer_document_parse_and_bad_values_are_refused() {
    let doc = |v: &str| consumer("c", &format!("delivery: Shared\neventVersions: {v}\nsink: {{log: {{}}}}"));
    let want = |v: &str| {
        let defs = highwater::definitions::parse(&doc(v), "test").unwrap();
        defs[0].spec.event_versions.as_ref().and_then(|e| e.want())
    };
    assert_eq!(want("latest"), Some(json!({"*": "latest"})));
    assert_eq!(want("stored"), None);
    assert_eq!(
        want("{OrderPlaced: latest, OrderShipped: 2, Other: stored}"),
        Some(json!({"OrderPlaced": "latest", "OrderShipped": 2}))
    );
    let e = highwater::definitions::parse(&doc("sideways"), "test").unwrap_err().to_string();
    assert!(e.contains("eventVersions"), "{e}");
}
