//! The supported PostgreSQL majors (docs/operations.md, "Supported PostgreSQL"): a server older
//! than 14 is refused before anything is written, by `migrate` and by every command that starts
//! against a database; the server the suite runs on is a supported one, and the one meant.
//!
//! The refusal runs a real PostgreSQL 13: `$HIGHWATER_PG13_BINDIR`, else the binaries
//! `e2e/pg/majors.sh bindir 13` fetches (and caches) from the npm registry.
mod common;

use std::{path::PathBuf, process::Command, time::Duration};

use common::*;
use highwater::{
    Error, db,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    migrate::server_version,
};

fn pg13_bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("HIGHWATER_PG13_BINDIR") {
        return PathBuf::from(dir);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../e2e/pg/majors.sh");
    let out = Command::new("bash").args([script, "bindir", "13"]).output().expect("run e2e/pg/majors.sh");
    assert!(
        out.status.success(),
        "fetching PostgreSQL 13 failed (set HIGHWATER_PG13_BINDIR to its bin directory to skip the fetch):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs `highwater ARGS` against `url`; (exit code, stderr).
fn highwater(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(bin())
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn highwater");
    // A refusal is immediate: a command still running after this long did not refuse.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("highwater {args:?} still running against PostgreSQL 13 after 20s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn postgresql_13_is_refused_before_anything_is_written() {
    let pg = EmbeddedPostgres::start(EmbeddedOptions { bindir: Some(pg13_bindir()), ..Default::default() })
        .await
        .expect("start PostgreSQL 13");
    let url = pg.url();
    let pool = db::connect(&url, 2).await.unwrap();
    let num: String = sqlx::query_scalar("SHOW server_version_num").fetch_one(&pool).await.unwrap();
    assert!(num.starts_with("13"), "the refusal test runs on PostgreSQL 13, got {num}");
    let version = server_version::display(num.parse().unwrap());
    let problem = format!("PostgreSQL {version} is not supported (14 or newer");

    for args in [
        &["migrate"][..],
        &["dispatch", "--instance-id", "a"],
        &["consumer", "list"],
        &["events", "prune", "--older-than", "30"],
    ] {
        let (code, stderr) = highwater(&url, args);
        assert!(code.is_some_and(|c| c != 0), "highwater {args:?} exited {code:?} on 13:\n{stderr}");
        let first = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
        assert!(first.starts_with(&format!("error: {problem}")), "highwater {args:?} said:\n{stderr}");
        assert!(stderr.contains("fix: upgrade the server to PostgreSQL 14 or newer"), "{args:?}:\n{stderr}");
    }
    // The library's migrate (the operator's --migrate, the quickstart) refuses the same way.
    match db::migrate(&pool).await {
        Err(Error::Refused(r)) => assert!(r.problem.starts_with(&problem), "{r}"),
        other => panic!("db::migrate on 13: {other:?}"),
    }

    // Nothing written: no schema, no bookkeeping table, in no schema.
    let (schema, tables): (bool, i64) = sqlx::query_as(
        "SELECT to_regnamespace('highwater') IS NOT NULL,
                (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast'))",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((schema, tables), (false, 0), "PostgreSQL 13 was written to");
}

/// The version matrix (e2e/pg/majors.sh) sets HIGHWATER_EXPECT_MAJOR: this proves the suites of
/// that run really ran on that major, not on the machine's default server.
#[tokio::test(flavor = "multi_thread")]
async fn the_server_under_test_is_supported_and_the_one_meant() {
    let db = setup(&[]).await;
    let num: String = sqlx::query_scalar("SHOW server_version_num").fetch_one(&db.pool).await.unwrap();
    let num: u32 = num.parse().unwrap();
    assert_eq!(server_version::support(num), server_version::Support::Supported, "{}", server_version::display(num));
    if let Ok(want) = std::env::var("HIGHWATER_EXPECT_MAJOR") {
        assert_eq!(server_version::major(num).to_string(), want, "HIGHWATER_PG_BINDIR points at another major");
    }
    eprintln!("running on PostgreSQL {}", server_version::display(num));
}
