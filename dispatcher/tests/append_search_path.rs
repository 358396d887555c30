//! `highwater.append` pins no search path (migrations/20261201000030_append_cost.sql: a SET
//! clause costs a setting save and restore per call) yet runs with its owner's rights. A writer
//! who puts a schema of its own first in its search path, with operators and functions named
//! like the built-ins append uses, must not get them called: every name inside append, its
//! triggers and its schema check is qualified.
mod common;

use common::*;
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection, Row};

/// A writer role with only what docs/events.md grants, and a schema it owns whose operators and
/// functions shadow the built-ins append relies on; each records the call (and as whom).
const HOSTILE: &str = r#"
CREATE ROLE writer NOLOGIN;
GRANT USAGE ON SCHEMA highwater TO writer;
GRANT EXECUTE ON FUNCTION highwater.append(text, text, text, jsonb, jsonb, text, bigint) TO writer;
CREATE SCHEMA evil AUTHORIZATION writer;
SET ROLE writer;
CREATE TABLE evil.calls (what text NOT NULL, by_user text NOT NULL);
CREATE FUNCTION evil.text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('text =', current_user); RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq);
CREATE FUNCTION evil.text_ne(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('text <>', current_user); RETURN a OPERATOR(pg_catalog.<>) b; END $$;
CREATE OPERATOR evil.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_ne);
CREATE FUNCTION evil.has_key(a jsonb, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('jsonb ?', current_user); RETURN a OPERATOR(pg_catalog.?) b; END $$;
CREATE OPERATOR evil.? (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = evil.has_key);
CREATE FUNCTION evil.concat(a jsonb, b jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('jsonb ||', current_user); RETURN a OPERATOR(pg_catalog.||) b; END $$;
CREATE OPERATOR evil.|| (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = evil.concat);
CREATE FUNCTION evil.text_match(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('text ~', current_user); RETURN a OPERATOR(pg_catalog.~) b; END $$;
CREATE OPERATOR evil.~ (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_match);
CREATE FUNCTION evil.substr(t text, f int, n int) RETURNS text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('substr', current_user); RETURN pg_catalog.substr(t, f, n); END $$;
CREATE FUNCTION evil.int8_lt(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('bigint <', current_user); RETURN a OPERATOR(pg_catalog.<) b; END $$;
CREATE OPERATOR evil.< (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.int8_lt);
CREATE FUNCTION evil.current_setting(n text, m boolean) RETURNS text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('current_setting', current_user); RETURN pg_catalog.current_setting(n, m); END $$;
CREATE FUNCTION evil.jsonb_typeof(j jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('jsonb_typeof', current_user); RETURN pg_catalog.jsonb_typeof(j); END $$;
CREATE FUNCTION evil.gen_random_uuid() RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('gen_random_uuid', current_user); RETURN pg_catalog.gen_random_uuid(); END $$;
CREATE FUNCTION evil.pg_notify(c text, p text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN INSERT INTO evil.calls VALUES ('pg_notify', current_user); PERFORM pg_catalog.pg_notify(c, p); END $$;
RESET ROLE;
"#;

/// How often the shadowing operators and functions ran, and how often with another role's rights.
async fn calls(conn: &mut PgConnection) -> (i64, i64) {
    // Qualified: this session's own unqualified `<>` would be evil's.
    let sql = "SELECT count(*) AS n, count(*) FILTER (WHERE by_user OPERATOR(pg_catalog.<>) 'writer') AS owner \
               FROM evil.calls";
    let r = sqlx::query(sql).fetch_one(conn).await.unwrap();
    (r.get::<i64, _>("n"), r.get::<i64, _>("owner"))
}

#[tokio::test]
async fn a_hostile_search_path_reaches_nothing_inside_append() {
    let db = setup(&["Known"]).await;
    let schema = json!({"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}});
    highwater::event_types::register(&db.pool, "Paid", Some(&schema), None).await.unwrap();
    sqlx::raw_sql(HOSTILE).execute(&db.pool).await.unwrap();

    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    conn.execute("SET ROLE writer; SET search_path = evil, pg_catalog").await.unwrap();
    // The shadowing works where names are not qualified: the test can fail.
    let eq: bool = sqlx::query_scalar("SELECT 'a'::text = 'a'::text").fetch_one(&mut conn).await.unwrap();
    assert!(eq);
    assert_eq!(calls(&mut conn).await, (1, 0), "the unqualified `=` above went through evil");

    // Every path through append: the common one, metadata merged, tenant from the setting, the
    // schema check, versioned appends (the stream-order trigger), the trace context, and each error.
    for sql in [
        "SELECT highwater.append('s', '1', 'Known', '{}')",
        "SELECT highwater.append('s', '1', 'Known', '{}', '{\"user\": \"x\"}')",
        "SELECT highwater.append('s', '1', 'Paid', '{\"amount\": 3}')",
        "SELECT highwater.append('s', '2', 'Known', '{}', NULL, NULL, 0)",
        "SELECT highwater.append('s', '2', 'Known', '{}', NULL, 'acme', 1)",
        // The writer's trace (trace_context.sql): explicit, malformed, and from the setting.
        "SELECT highwater.append('s', '3', 'Known', '{}',          '{\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\", \"tracestate\": \"a=b\"}')",
        "SELECT highwater.append('s', '3', 'Known', '{}', '{\"traceparent\": \"garbage\"}')",
        "SET highwater.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'",
        "SELECT highwater.append('s', '3', 'Known', '{}')",
        "RESET highwater.traceparent",
    ] {
        sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for (sql, code) in [
        ("SELECT highwater.append('s', '1', 'Unknown', '{}')", "HW001"),
        ("SELECT highwater.append('', '1', 'Known', '{}')", "HW002"),
        ("SELECT highwater.append('s', '1', 'Known', '{}', '[]')", "HW002"),
        ("SELECT highwater.append('s', '1', 'Paid', '{}')", "HW002"),
        ("SELECT highwater.append('s', '2', 'Known', '{}', NULL, NULL, 1)", "HW003"),
    ] {
        let e = sqlx::query(sql).execute(&mut conn).await.unwrap_err();
        assert_eq!(e.as_database_error().and_then(|d| d.code()).as_deref(), Some(code), "{sql}: {e}");
    }
    assert_eq!(calls(&mut conn).await, (1, 0), "nothing inside append resolved through the caller's search path");

    let stored = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await;
    assert_eq!(stored, 8);
    let traced = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events WHERE metadata ? 'traceparent'").await;
    assert_eq!(traced, 2, "the explicit and the setting's traceparent were stored, the malformed one left out");
    let versions = scalar_i64(
        &db.pool,
        "SELECT version FROM highwater.stream_versions WHERE stream_type = 's' AND stream_id = '2'",
    )
    .await;
    assert_eq!(versions, 2);
}
