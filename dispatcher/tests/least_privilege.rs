//! Least privilege (docs/security.md, "Database roles"): exactly the SQL `highwater roles --print`
//! prints, run on a fresh cluster, is enough for every part to do its work — migrate as a schema
//! owner that is no superuser, a dispatcher delivering to a SQL sink (under its sink role) and a
//! log sink, ops, retention, the operator's writes, an application's append, token and wait — and
//! each role is refused what is not its part with `permission denied`. A role without `USAGE` on
//! the schema is refused at start, naming the fix, with nothing written.
mod common;

use std::{path::Path, process::Command, time::Duration};

use common::{Dispatcher, bin, consumer, eventually};
use highwater::{definitions, embedded::EmbeddedPostgres, event_types, kubernetes, ops, shards};
use sqlx::PgPool;

const DB: &str = "shop";

struct Cluster {
    pg: EmbeddedPostgres,
}

impl Cluster {
    fn url(&self, role: &str) -> String {
        format!("postgres://{role}@127.0.0.1:{}/{DB}", self.pg.port())
    }

    async fn pool(&self, role: &str) -> PgPool {
        highwater::db::connect(&self.url(role), 4).await.unwrap_or_else(|e| panic!("connect as {role}: {e}"))
    }
}

/// Runs the `highwater` binary as `role`; (exit code, stdout, stderr).
fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).env("DATABASE_URL", url).env("HIGHWATER_LOG", "warn").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cli_ok(url: &str, args: &[&str]) -> String {
    let (code, out, err) = cli(url, args);
    assert_eq!(code, 0, "highwater {args:?} failed:\n{out}\n{err}");
    out
}

/// Asserts that `sql`, run by `pool`'s role, is refused for lack of a privilege (SQLSTATE 42501).
async fn refused(pool: &PgPool, sql: &str) -> String {
    let e = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(pool).await.expect_err(sql);
    let db = e.as_database_error().unwrap_or_else(|| panic!("{sql}: not a database error: {e}"));
    assert_eq!(db.code().as_deref(), Some("42501"), "{sql}: {e}");
    db.message().to_owned()
}

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn the_printed_roles_suffice_and_refuse_everything_else() {
    let pg = EmbeddedPostgres::start(Default::default()).await.expect("start postgres");
    let admin_url = pg.create_database(DB).await.unwrap();
    let c = Cluster { pg };
    let admin = highwater::db::connect(&admin_url, 4).await.unwrap();

    // The script, exactly as printed; part 1 as the administrator.
    let script = cli_ok(&admin_url, &["roles", "--print", "--sql-sink-role", "projector"]);
    assert!(script.contains("\"shop\""), "the database comes from DATABASE_URL:\n{script}");
    let (part1, part2) = script.split_once("-- Part 2").expect("two parts");
    sqlx::raw_sql(sqlx::AssertSqlSafe(part1.to_owned())).execute(&admin).await.expect("part 1");
    // Idempotent.
    sqlx::raw_sql(sqlx::AssertSqlSafe(part1.to_owned())).execute(&admin).await.expect("part 1 again");
    let superusers: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'highwater\\_%' AND (rolsuper OR rolcreaterole OR rolcreatedb)",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(superusers, 0);

    // Migrate as the owner (no superuser), then part 2 as the owner, twice.
    let (owner, dispatcher, app) = (c.url("highwater_owner"), c.url("highwater_dispatcher"), c.url("highwater_app"));
    cli_ok(&owner, &["migrate"]);
    let owner_pool = c.pool("highwater_owner").await;
    for _ in 0..2 {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("-- Part 2{part2}"))).execute(&owner_pool).await.expect("part 2");
    }
    cli_ok(&owner, &["migrate"]);

    // The read model and a table the sink role must not reach: the application's own schema.
    sqlx::raw_sql(
        "CREATE TABLE public.orders (event_id bigint PRIMARY KEY, stream_id text NOT NULL);
         CREATE TABLE public.secrets (x int);
         GRANT SELECT, INSERT ON public.orders TO projector;",
    )
    .execute(&admin)
    .await
    .unwrap();

    // The dispatcher's role: event types, consumers, delivery.
    cli_ok(&dispatcher, &["event-types", "register", "OrderPlaced"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("consumers.yaml");
    std::fs::write(
        &file,
        consumer(
            "projection",
            "delivery: Shared\nsink:\n  sql:\n    role: projector\n    statement: \"INSERT INTO orders VALUES ($2, $4)\"",
        ) + &consumer("logged", "delivery: Shared\nsink: {log: {}}")
            + &consumer("nosy", "delivery: Shared\nmaxAttempts: 1\nerrorMode: skip\nsink: {sql: {role: projector, statement: 'INSERT INTO secrets VALUES (1)'}}"),
    )
    .unwrap();
    cli_ok(&dispatcher, &["consumer", "apply", "--filename", file.to_str().unwrap()]);
    let d = Dispatcher::start(&dispatcher, "d1", dir.path());

    // The application: append (CLI and SQL), append_position, token, applied.
    let app_pool = c.pool("highwater_app").await;
    cli_ok(
        &app,
        &["events", "append", "--stream-type", "order", "--stream-id", "1", "--type", "OrderPlaced", "--payload", "{}"],
    );
    let token: String = sqlx::query_scalar(
        "SELECT highwater.token()::text FROM (SELECT highwater.append('order', '2', 'OrderPlaced', '{}') OFFSET 0) a",
    )
    .fetch_one(&app_pool)
    .await
    .expect("append and token as the application");
    let _: (i64, String) =
        sqlx::query_as("SELECT id, token::text FROM highwater.append_position('order', '3', 'OrderPlaced', '{}')")
            .fetch_one(&app_pool)
            .await
            .expect("append_position as the application");
    eventually("the projection holds 3 orders", Duration::from_secs(30), || async {
        count(&admin, "SELECT count(*) FROM public.orders").await == 3
    })
    .await;
    let applied: bool = sqlx::query_scalar("SELECT highwater.applied('projection', $1::xid8)")
        .bind(&token)
        .fetch_one(&app_pool)
        .await
        .expect("applied as the application");
    assert!(applied);
    cli_ok(&dispatcher, &["consumer", "wait", "logged", "--after", &token, "--timeout", "30s"]);
    // The sink role confines the statement.
    eventually("nosy's events are dead letters", Duration::from_secs(30), || async {
        count(&admin, "SELECT count(*) FROM highwater.dead_letters WHERE consumer = 'nosy'").await == 3
    })
    .await;
    let why: String = sqlx::query_scalar("SELECT error FROM highwater.dead_letters WHERE consumer = 'nosy' LIMIT 1")
        .fetch_one(&admin)
        .await
        .unwrap();
    assert!(why.contains("permission denied for table secrets"), "{why}");
    assert_eq!(count(&admin, "SELECT count(*) FROM public.secrets").await, 0);

    // Ops and retention as the dispatcher's role, through the CLI.
    cli_ok(&dispatcher, &["consumer", "disable", "projection"]);
    cli_ok(&dispatcher, &["consumer", "enable", "projection"]);
    cli_ok(&dispatcher, &["consumer", "rewind", "logged", "--to", "earliest"]);
    cli_ok(&dispatcher, &["consumer", "status", "projection"]);
    cli_ok(&dispatcher, &["consumer", "dead-letters"]);
    cli_ok(&dispatcher, &["events", "partitions", "--create"]);
    eventually("logged replays", Duration::from_secs(30), || async {
        cli(&dispatcher, &["consumer", "wait", "logged", "--after", &token, "--timeout", "0"]).0 == 0
    })
    .await;
    let (code, out, err) = cli(&dispatcher, &["consumer", "skip", "projection"]);
    assert_ne!(code, 0, "nothing to skip, refused (not denied):\n{out}{err}");
    assert!(!err.contains("permission denied"), "{err}");
    cli_ok(&dispatcher, &["events", "prune", "--older-than", "0", "--all-stream-types"]);
    assert_eq!(count(&admin, "SELECT count(*) FROM highwater.events").await, 0, "pruned as the dispatcher");

    // The operator's writes, with the store's functions it calls.
    let op = c.pool("highwater_operator").await;
    let source = kubernetes::source("shop", "k8s");
    let defs = definitions::parse(&consumer("k8s", "delivery: PerInstance\nsink: {log: {}}"), &source).unwrap();
    definitions::apply(&op, &defs).await.expect("operator applies a consumer");
    assert_eq!(kubernetes::consumer_source(&op, "k8s").await.unwrap().as_deref(), Some(source.as_str()));
    assert_eq!(kubernetes::kubernetes_consumers(&op, None).await.unwrap().len(), 1);
    let mut conn = op.acquire().await.unwrap();
    assert!(shards::register_for_pod(&mut conn, "k8s", "pod-a", "uid-a").await.expect("operator registers a pod"));
    drop(conn);
    ops::status(&op, Some("k8s")).await.expect("operator reads status");
    ops::disable(&op, "k8s", None, &ops::Audit::by("test")).await.expect("operator disables");
    ops::enable(&op, "k8s", None, &ops::Audit::by("test")).await.expect("operator enables");
    // Nothing is dead: refused, never denied.
    if let Err(e) = ops::restart(&op, "projection", None, &ops::Audit::by("test")).await {
        assert!(!e.to_string().contains("permission denied"), "{e}");
    }
    let removed = kubernetes::delete_pod_shards_except(&op, "k8s", &[]).await.expect("operator deletes pod shards");
    assert_eq!(removed.len(), 1);
    definitions::delete(&op, "k8s").await.expect("operator deletes a consumer");
    // An EventType resource: a type with two versions (the second upcast from the first, dry-run
    // over the stored events) and a former name, as the operator applies it.
    let spec = event_types::TypeSpec {
        event_type: "OrderShipped".into(),
        description: Some("from an EventType".into()),
        compatibility: event_types::Compatibility::Backward,
        versions: vec![
            event_types::VersionSpec { version: 1, schema: Some(serde_json::json!({"type": "object"})), upcast: None },
            event_types::VersionSpec {
                version: 2,
                schema: Some(serde_json::json!({"type": "object", "properties": {"carrier": {"type": "string"}}})),
                upcast: Some("jsonb_set(payload, '{carrier}', '\"dhl\"')".into()),
            },
        ],
        aliases: vec!["ParcelShipped".into()],
    };
    let applied = event_types::apply_type(&op, &spec).await.expect("operator applies an EventType");
    assert_eq!(applied.latest, 2);
    event_types::version_counts(&op, "OrderShipped").await.expect("operator counts events per version");

    // What each role must not do.
    let dispatcher_pool = c.pool("highwater_dispatcher").await;
    let mut denied = Vec::new();
    for (who, pool, sql) in [
        ("application", &app_pool, "INSERT INTO highwater.consumer_shards (consumer, instance_id) VALUES ('x', 'y')"),
        ("application", &app_pool, "UPDATE highwater.consumer_shards SET status = 'disabled'"),
        ("application", &app_pool, "SELECT * FROM highwater.events"),
        (
            "application",
            &app_pool,
            "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload) VALUES ('o', '1', 'OrderPlaced', '{}')",
        ),
        ("application", &app_pool, "SELECT highwater.repartition('projection', false)"),
        ("application", &app_pool, "SELECT highwater.create_event_partitions()"),
        ("application", &app_pool, "SELECT * FROM public.orders"),
        ("dispatcher", &dispatcher_pool, "DROP TABLE highwater.events"),
        ("dispatcher", &dispatcher_pool, "TRUNCATE highwater.consumer_shards"),
        ("dispatcher", &dispatcher_pool, "ALTER TABLE highwater.consumers ADD COLUMN x int"),
        ("dispatcher", &dispatcher_pool, "CREATE TABLE highwater.x (x int)"),
        ("dispatcher", &dispatcher_pool, "SELECT * FROM public.secrets"),
        (
            "operator",
            &op,
            "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload) VALUES ('o', '1', 'OrderPlaced', '{}')",
        ),
        ("operator", &op, "DELETE FROM highwater.events"),
        ("operator", &op, "SELECT highwater.append('order', '9', 'OrderPlaced', '{}')"),
        ("operator", &op, "DROP TABLE highwater.consumers"),
        ("owner", &owner_pool, "SELECT * FROM public.secrets"),
    ] {
        let message = refused(pool, sql).await;
        println!("{who}: {sql}\n    -> {message}");
        denied.push(message);
    }
    assert!(denied.iter().all(|m| m.starts_with("permission denied") || m.starts_with("must be owner")), "{denied:#?}");

    assert_eq!(d.terminate(Duration::from_secs(15)), Some(0), "{}", log(dir.path(), "d1"));
}

fn log(dir: &Path, instance: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{instance}.log"))).unwrap_or_default()
}

/// A role that may log in but was given none of the grants: every binary refuses at start, in one
/// line naming the problem and the fix, and writes nothing.
#[tokio::test]
async fn a_role_without_usage_on_the_schema_is_refused_at_start_with_the_fix() {
    let pg = EmbeddedPostgres::start(Default::default()).await.expect("start postgres");
    let admin_url = pg.create_database(DB).await.unwrap();
    let c = Cluster { pg };
    let admin = highwater::db::connect(&admin_url, 4).await.unwrap();
    highwater::db::migrate(&admin).await.unwrap();
    sqlx::raw_sql("CREATE ROLE stranger LOGIN").execute(&admin).await.unwrap();
    let url = c.url("stranger");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, consumer("orders", "delivery: Shared\nsink: {log: {}}")).unwrap();

    let expected = "role \"stranger\" has no USAGE on schema highwater";
    for args in [
        vec!["consumer", "list"],
        vec!["consumer", "apply", "--filename", file.to_str().unwrap()],
        vec!["events", "append", "--stream-type", "o", "--stream-id", "1", "--type", "T", "--payload", "{}"],
        vec!["dispatch", "--listen", "off", "--instance-id", "s1", "--consumers", file.to_str().unwrap()],
    ] {
        let (code, out, err) = cli(&url, &args);
        assert_ne!(code, 0, "{args:?}:\n{out}{err}");
        let line = err.lines().find(|l| l.contains(expected)).unwrap_or_else(|| panic!("{args:?}:\n{err}"));
        assert!(line.contains("stranger@127.0.0.1"), "names the target: {line}");
        assert!(err.contains("highwater roles --print"), "names the fix: {err}");
        println!("{args:?} -> exit {code}\n{err}");
    }
    for table in ["consumers", "consumer_shards", "dispatchers", "events"] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM highwater.{table}")))
            .fetch_one(&admin)
            .await
            .unwrap();
        assert_eq!(n, 0, "nothing written to highwater.{table}");
    }

    // USAGE alone, without the table grants: the dispatcher is refused on the first read, with the fix.
    sqlx::raw_sql("GRANT USAGE ON SCHEMA highwater TO stranger").execute(&admin).await.unwrap();
    let (code, out, err) = cli(&url, &["consumer", "list"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("permission denied"), "{err}");
}

/// docs/security.md shows the output this test runs, as printed today (the version's commit aside).
#[test]
fn the_documented_grants_are_the_printed_ones() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/security.md")).unwrap();
    let (code, printed, err) = cli("", &["roles", "--print", "--database", "app", "--sql-sink-role", "projector"]);
    assert_eq!(code, 0, "{err}");
    let first = printed.lines().next().unwrap();
    let version_end = first.find(") database roles").map(|i| i + 1).unwrap_or(0);
    let version_start = first[..version_end].rfind(" (").unwrap_or(version_end);
    let printed = printed.replacen(&first[version_start..version_end], "", 1);
    assert!(doc.contains(&format!("```sql\n{printed}```")), "docs/security.md differs from:\n{printed}");
}
