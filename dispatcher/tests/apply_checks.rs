//! Rough edges of issue 44, through the `highwater` binary against a real cluster: numbers in a
//! YAML file named with their field, range and fix beside the file's other problems; a SQL sink's
//! statement checked when it is applied, not at delivery; an invalid event type name called so,
//! instead of a register command that does not work when pasted.
mod common;

use std::process::Command;

use common::*;
use highwater::definitions;

fn run_cli(args: &[&str], url: &str) -> (i32, String, String) {
    let out =
        Command::new(bin()).args(args).env("DATABASE_URL", url).env_remove("HIGHWATER_INSTANCE_ID").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn every_bad_number_is_named_with_its_range_beside_the_other_problems() {
    let db = setup(&["Known"]).await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("numbers.yaml");
    std::fs::write(
        &f,
        consumer(
            "numbers",
            "delivery: Shared\nbatchSize: -5\nmaxAttempts: '10'\npartitions: 1.5\n\
             backoff: {initial: soon}\nsink: {sse: {buffer: 99999999999}}",
        ),
    )
    .unwrap();
    let (code, out, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], &db.url);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    for expected in [
        "maxAttempts: '10' is not a whole number: write a whole number from 1 to 1000 (default 10)",
        "batchSize: -5 is out of range: write a whole number from 1 to 10000 (default 100)",
        "partitions: 1.5 is not a whole number: write a whole number from 1 to 256 (default 1)",
        "sink.sse.buffer: 99999999999 is out of range: write a whole number from 1 to 1000000 (default 1024)",
        // The document's other problems, which the first bad number used to hide.
        "backoff.initial: \"soon\" is not a duration",
        "sink.sse: server-sent events reach clients of one dispatcher instance",
    ] {
        assert!(err.contains(expected), "{expected:?} missing from: {err}");
    }
    assert!(!err.contains("expected u32"), "{err}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumers").await, 0);

    // A number in range with a bad eventVersions and an unknown field: all three named.
    let e = definitions::parse(
        &consumer("v", "delivery: Shared\nbatchSize: 0\neventVersions: sideways\nbogus: 1\nsink: {log: {}}"),
        "f",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("batchSize: 0 is out of range"), "{e}");
    assert!(e.contains("eventVersions: \"sideways\" is not `latest`, `stored` or a version number"), "{e}");
    assert!(e.contains("unknown field `bogus`"), "{e}");
    // In range, the defaults and the values given stand.
    let d = definitions::parse(&consumer("ok", "delivery: Shared\nbatchSize: 10000\nsink: {log: {}}"), "f").unwrap();
    assert_eq!((d[0].spec.batch_size, d[0].spec.max_attempts), (10_000, 10));

    // An EventType file: each version number by its path, with the other problems.
    let t = dir.path().join("types.yaml");
    std::fs::write(
        &t,
        "apiVersion: highwater.dev/v1alpha1\nkind: EventType\nmetadata: {name: paid}\nspec:\n  eventType: Paid\n  \
         versions:\n    - {version: 1}\n    - {version: 2.5}\n    - {version: 3000000000}\n  colour: blue\n",
    )
    .unwrap();
    let (code, _, err) = run_cli(&["event-types", "apply", "-f", t.to_str().unwrap()], &db.url);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("spec.versions[1].version: 2.5 is not a whole number: write the version's number, from 1 to 100"),
        "{err}"
    );
    assert!(err.contains("spec.versions[2].version: 3000000000 is out of range"), "{err}");
    assert!(err.contains("unknown field `colour`"), "{err}");
    assert!(!err.contains("expected i32"), "{err}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.event_types WHERE event_type = 'Paid'").await, 0);
}

#[tokio::test]
async fn a_sql_statement_that_cannot_run_is_refused_at_apply_with_its_position() {
    let db = setup(&["Known"]).await;
    sqlx::raw_sql("CREATE TABLE seen (event_id bigint, stream_id text)").execute(&db.pool).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("sql.yaml");
    let write = |spec: &str| std::fs::write(&f, consumer("proj", spec)).unwrap();

    // A typo: refused at apply, with PostgreSQL's error and where it is.
    write("delivery: Shared\nsink:\n  sql:\n    statement: |\n      INSRT INTO seen\n      VALUES ($2, $4)");
    let (code, out, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], &db.url);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("sink.sql.statement cannot run, at line 1, column 1: syntax error at or near \"INSRT\""),
        "{err}"
    );
    assert!(err.contains("fix: correct the statement (it runs with $1 payload jsonb"), "{err}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumers").await, 0, "nothing applied");

    // A column that is not there, on line 2; a parameter of the wrong type.
    write("delivery: Shared\nsink:\n  sql:\n    statement: |\n      INSERT INTO seen\n      VALUES ($2, nope)");
    let (code, _, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], &db.url);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("at line 2, column 13: column \"nope\" does not exist"), "{err}");
    write("delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen VALUES ($1, $4)'}}");
    let (code, _, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], &db.url);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("column \"event_id\" is of type bigint but expression is of type jsonb"), "{err}");

    // The set form reads highwater_batch; a column it does not have is refused too.
    write(
        "delivery: Shared\nsink: {sql: {form: set, statement: 'INSERT INTO seen SELECT id, stream FROM highwater_batch'}}",
    );
    let (code, _, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], &db.url);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("column \"stream\" does not exist"), "{err}");
    assert!(err.contains("at line 1, column 29"), "{err}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.consumers").await, 0, "nothing applied");

    // Good statements of both forms apply, and run: the check left no function behind.
    write("delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen VALUES ($2, $4);'}}");
    let (code, out, err) = run_cli(&["consumer", "apply", "-f", f.to_str().unwrap()], &db.url);
    assert_eq!((code, out.as_str()), (0, "eventconsumer/proj created\n"), "{err}");
    let set = consumer(
        "batch",
        "delivery: Shared\nsink: {sql: {form: set, statement: 'INSERT INTO seen SELECT id, stream_id FROM highwater_batch'}}",
    );
    apply(&db.pool, &set).await;
    let temp: i64 = scalar_i64(&db.pool, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'hw_sink%'").await;
    assert_eq!(temp, 0, "the check's functions were rolled back");
    let mut tx = db.pool.begin().await.unwrap();
    highwater::append(&mut tx, &highwater::NewEvent::new("s", "1", "Known", serde_json::json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM seen", 2, std::time::Duration::from_secs(30)).await;
}

#[tokio::test]
async fn an_invalid_event_type_name_is_called_invalid_not_suggested() {
    let db = setup(&["Known"]).await;
    let append = |t: &str| {
        run_cli(
            &["events", "append", "--stream-type", "order", "--stream-id", "1", "--type", t, "--payload", "{}"],
            &db.url,
        )
    };
    let (code, _, err) = append("Order Placed");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid event type name \"Order Placed\": a name starts with a letter"), "{err}");
    assert!(err.contains("fix: use a name such as OrderPlaced"), "{err}");
    assert!(!err.contains("register Order Placed"), "no command that cannot work: {err}");

    // A valid name that is not registered: the command works as pasted.
    let (code, _, err) = append("OrderPlaced");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("unknown event type \"OrderPlaced\"")
            && err.contains("`highwater event-types register OrderPlaced`"),
        "{err}"
    );
    let (code, _, err) = run_cli(&["event-types", "register", "OrderPlaced"], &db.url);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = append("OrderPlaced");
    assert_eq!(code, 0, "{err}");

    // The same from SQL, with a version and without.
    for sql in [
        "SELECT highwater.append('s', '1', 'Order Placed', '{}')",
        "SELECT highwater.append('s', '1', 'Order Placed', '{}', NULL, NULL, NULL, 1)",
        "SELECT highwater.append('s', '', '9lives', '{}')",
    ] {
        let e = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&db.pool).await.unwrap_err();
        let db_err = e.as_database_error().unwrap();
        assert_eq!(db_err.code().as_deref(), Some("HW001"), "{sql}");
        assert!(db_err.message().starts_with("invalid event type name \""), "{sql}: {}", db_err.message());
    }
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await, 1);
}
