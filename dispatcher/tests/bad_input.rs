//! Every bad input gets an error that names the problem and the fix; nothing is stored or
//! advanced on error.
mod common;

use std::process::Command;

use common::*;
use highwater::{Error, NewEvent, append, definitions, event_types};
use serde_json::json;

fn run_cli(args: &[&str], url: Option<&str>) -> (i32, String, String) {
    let mut c = Command::new(bin());
    c.args(args).env_remove("DATABASE_URL").env_remove("HIGHWATER_INSTANCE_ID");
    if let Some(u) = url {
        c.env("DATABASE_URL", u);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn append_errors_name_the_problem_and_store_nothing() {
    let db = setup(&["Known"]).await;
    let schema =
        json!({"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer", "minimum": 1}}});
    event_types::register(&db.pool, "Paid", Some(&schema), None).await.unwrap();

    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Known", json!({}))).await.unwrap();
    let e = append(&mut tx, &NewEvent::new("s", "1", "Unknwn", json!({}))).await.unwrap_err();
    assert!(matches!(e, Error::UnknownEventType { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("\"Unknwn\"") && msg.contains("highwater event-types register Unknwn"), "{msg}");
    drop(tx);

    for (payload, needle) in [
        (json!({}), "required property \"amount\" is missing"),
        (json!({"amount": 0}), "$.amount: 0 is less than the minimum 1"),
        (json!({"amount": "7"}), "$.amount: expected type \"integer\", got string"),
        (json!({"amount": 1.5}), "expected type \"integer\""),
    ] {
        let mut tx = db.pool.begin().await.unwrap();
        let e = append(&mut tx, &NewEvent::new("s", "1", "Paid", payload)).await.unwrap_err();
        assert!(matches!(e, Error::InvalidPayload { .. }), "{e:?}");
        assert!(e.to_string().contains(needle), "{e}");
    }
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await, 0, "nothing stored");

    // Valid payloads go through; the SQL function raises the same errors for other languages.
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Paid", json!({"amount": 3}))).await.unwrap();
    tx.commit().await.unwrap();
    let e = sqlx::query("SELECT highwater.append('s', '1', 'Nope', '{}')").execute(&db.pool).await.unwrap_err();
    assert_eq!(e.as_database_error().unwrap().code().as_deref(), Some("HW001"));
}

#[tokio::test]
async fn expected_version_conflicts_are_refused() {
    let db = setup(&["Opened", "Renamed"]).await;
    let mut ev = NewEvent::new("account", "7", "Opened", json!({}));
    ev.expected_version = Some(0);
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &ev).await.unwrap();
    tx.commit().await.unwrap();

    // A stale writer is refused.
    let mut stale = NewEvent::new("account", "7", "Renamed", json!({}));
    stale.expected_version = Some(0);
    let mut tx = db.pool.begin().await.unwrap();
    let e = append(&mut tx, &stale).await.unwrap_err();
    assert!(matches!(e, Error::VersionConflict { .. }), "{e:?}");
    assert!(e.to_string().contains("is at version 1, expected 0"), "{e}");
    drop(tx);

    // Two concurrent writers with the same expectation: exactly one wins.
    let mut next = NewEvent::new("account", "7", "Renamed", json!({}));
    next.expected_version = Some(1);
    let mut a = db.pool.begin().await.unwrap();
    let mut b = db.pool.begin().await.unwrap();
    append(&mut a, &next).await.unwrap();
    let b_result = tokio::spawn(async move {
        let r = append(&mut b, &next).await;
        (r, b)
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    a.commit().await.unwrap();
    let (r, _b) = b_result.await.unwrap();
    assert!(matches!(r, Err(Error::VersionConflict { .. })), "{r:?}");
    let versions: Vec<i64> = sqlx::query_scalar("SELECT stream_version FROM highwater.events ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(versions, vec![1, 2]);
}

#[tokio::test]
async fn bad_definitions_are_refused_and_change_nothing() {
    let db = setup(&["Known"]).await;
    let ok = consumer("orders", "delivery: Shared\nsink: {log: {}}");
    apply(&db.pool, &ok).await;

    let unknown_type =
        definitions::parse(&consumer("x", "delivery: Shared\neventTypes: [Nope]\nsink: {log: {}}"), "f").unwrap();
    let e = definitions::apply(&db.pool, &unknown_type).await.unwrap_err().to_string();
    assert!(e.contains("unknown event types: Nope") && e.contains("event-types register"), "{e}");

    let changed = definitions::parse(&consumer("orders", "delivery: PerInstance\nsink: {log: {}}"), "f").unwrap();
    let e = definitions::apply(&db.pool, &changed).await.unwrap_err().to_string();
    assert!(
        e.contains("delivery cannot change from Shared to PerInstance") && e.contains("consumer delete orders"),
        "{e}"
    );
    let delivery: String = sqlx::query_scalar("SELECT delivery FROM highwater.consumers WHERE name = 'orders'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(delivery, "Shared");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumers").await, 1);

    // Through the CLI: file errors name the field and the document.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.yaml");
    std::fs::write(&f, consumer("bad", "delivery: Shared\nmaxAttemps: 3\nsink: {log: {}}")).unwrap();
    let (code, _, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], Some(&db.url));
    assert_eq!(code, 1);
    assert!(err.contains("unknown field `maxAttemps`") && err.contains("bad.yaml"), "{err}");
    std::fs::write(&f, consumer("bad", "delivery: Shared\nsink: {sse: {}}")).unwrap();
    let (code, _, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], Some(&db.url));
    assert_eq!(code, 1);
    assert!(err.contains("need `delivery: PerInstance`"), "{err}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumers").await, 1);
}

#[tokio::test]
async fn yaml_syntax_errors_name_the_file_line_and_column() {
    let db = setup(&[]).await;
    let yaml = consumer("broken", "delivery: [Shared\nsink: {log: {}}");

    // The library: the YAML error itself, not what the typed spec made of the half-parsed value.
    let e = definitions::parse(&yaml, "file:broken.yaml").unwrap_err();
    assert!(matches!(e, Error::Definition { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("YAML syntax error at line 7 column 7: did not find expected ',' or ']'"), "{msg}");
    assert!(msg.contains("while parsing a flow sequence at line 6 column 13"), "{msg}");
    assert!(!msg.contains("YAML tag"), "{msg}");

    // The CLI: the file named, the place, and a fix line; nothing applied.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("broken.yaml");
    std::fs::write(&f, &yaml).unwrap();
    let (code, _, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], Some(&db.url));
    assert_eq!(code, 1);
    let path = f.display().to_string();
    assert!(err.contains(&format!("invalid consumer definition in file:{path} (document 1)")), "{err}");
    assert!(err.contains("YAML syntax error at line 7 column 7"), "{err}");
    assert!(err.contains(&format!("\n  fix: correct the YAML at {path}:7:7 ")), "{err}");
    assert!(!err.contains("YAML tag"), "{err}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumers").await, 0);

    // `dispatch --consumers` reads the same files and refuses to start.
    let (code, _, err) = run_cli(&["dispatch", "--consumers", f.to_str().unwrap(), "--listen", "off"], Some(&db.url));
    assert_eq!(code, 1);
    assert!(err.contains(&format!("{path}:7:7")), "{err}");
}

#[tokio::test]
async fn reserved_instance_id_unreachable_and_unmigrated_databases() {
    let db = setup(&[]).await;
    let (code, _, err) = run_cli(&["dispatch", "--instance-id", "__shared__"], Some(&db.url));
    assert_eq!(code, 1);
    assert!(err.contains("reserved") && err.contains("fix:"), "{err}");

    let port = highwater::embedded::free_port().unwrap();
    let url = format!("postgres://highwater:s3cret@127.0.0.1:{port}/app");
    let (code, _, err) = run_cli(&["consumer", "list"], Some(&url));
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the database at highwater@127.0.0.1") && err.contains("fix:"), "{err}");
    assert!(!err.contains("s3cret"), "the password never appears: {err}");

    let fresh = db.pg.create_database("fresh").await.unwrap();
    let (code, _, err) = run_cli(&["consumer", "list"], Some(&fresh));
    assert_eq!(code, 1);
    assert!(err.contains("highwater migrate"), "{err}");

    // Migrations are idempotent: the second finds nothing to do.
    for expected in ["migrated ", "is up to date"] {
        let (code, out, err) = run_cli(&["migrate"], Some(&fresh));
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(expected)
                && out.contains(&format!("schema version {}", highwater::migrate::window::SCHEMA_VERSION)),
            "{out}"
        );
    }
    let (code, _, err) = run_cli(&["consumer", "list"], None);
    assert_eq!(code, 1);
    assert!(err.contains("DATABASE_URL"), "{err}");
}

/// docs/events.md: the CLI prints a problem line and a `fix:` line for every bad append.
#[tokio::test]
async fn bad_json_and_non_object_metadata_print_a_fix() {
    let db = setup(&["Known"]).await;
    let append_cli = |payload: &str, metadata: Option<&str>| {
        let mut args = vec!["events", "append", "--stream-type", "s", "--stream-id", "1", "--type", "Known"];
        args.extend(["--payload", payload]);
        if let Some(m) = metadata {
            args.extend(["--metadata", m]);
        }
        run_cli(&args, Some(&db.url))
    };
    let dir = tempfile::tempdir().unwrap();
    let bad_file = dir.path().join("meta.json");
    std::fs::write(&bad_file, "{\"user\": ops}").unwrap();
    let at_file = format!("@{}", bad_file.display());

    for (payload, metadata, problem, fix) in [
        (
            "{order_id: 42}",
            None,
            "--payload is not valid JSON: key must be a string at line 1 column 2",
            "--payload '{",
        ),
        (
            "{}",
            Some("{user: ops}"),
            "--metadata is not valid JSON: key must be a string",
            "--metadata '{\"user\": \"ops\"}'",
        ),
        (
            "{}",
            Some(at_file.as_str()),
            &format!("--metadata is not valid JSON (file {}): expected value at line 1 column 10", bad_file.display()),
            &format!("correct the JSON in {}", bad_file.display()),
        ),
        (
            "{}",
            Some("[\"ops\"]"),
            "metadata must be a JSON object, got array",
            "pass metadata as a JSON object, e.g. {\"user\": \"ops\"}",
        ),
        ("{}", Some("\"ops\""), "metadata must be a JSON object, got string", "pass metadata as a JSON object"),
    ] {
        let (code, out, err) = append_cli(payload, metadata);
        assert_eq!(code, 1, "{payload} {metadata:?}: {out}{err}");
        let lines: Vec<&str> = err.lines().collect();
        assert!(lines.len() == 2, "a problem line and a fix line:\n{err}");
        assert!(lines[0].starts_with("error: ") && lines[0].contains(problem), "{err}");
        assert!(lines[1].starts_with("  fix: ") && lines[1].contains(fix), "{err}");
    }
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await, 0, "nothing stored");

    // The library: HW002 for non-object metadata carries the hint too.
    let mut ev = NewEvent::new("s", "1", "Known", json!({}));
    ev.metadata = Some(json!(["ops"]));
    let mut tx = db.pool.begin().await.unwrap();
    let e = append(&mut tx, &ev).await.unwrap_err();
    let Error::InvalidPayload { message, hint } = &e else { panic!("{e:?}") };
    assert_eq!(message, "metadata must be a JSON object, got array");
    assert!(hint.as_deref().is_some_and(|h| h.contains("JSON object")), "{e:?}");
    assert!(e.to_string().contains("\n  fix: pass metadata as a JSON object"), "{e}");
}
