//! TLS to PostgreSQL: against a server that refuses unencrypted connections for the role, a URL
//! with `sslmode=verify-full` and the server's CA (`sslrootcert`) works for the CLI and a
//! dispatcher that delivers; `sslmode=disable` is refused by the server, and a certificate from
//! another CA is refused by the client — both with errors that say so.
mod common;

use std::{path::Path, time::Duration};

use common::*;
use highwater::{NewEvent, append, db};
use highwater_testkit::TestCluster;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::json;

/// A CA's certificate (PEM) and the issuer to sign with.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

/// Installs a server certificate for 127.0.0.1 into the data directory, turns `ssl` on and makes
/// `role` connect over TLS only.
async fn enable_tls(db: &TestDb, issuer: &Issuer<'_, KeyPair>, role: &str) {
    let data: String = sqlx::query_scalar("SHOW data_directory").fetch_one(&db.pool).await.unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "highwater-test-postgres");
    let cert = params.signed_by(&key, issuer).unwrap();
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&data).unwrap());
    for (file, pem) in [("server.crt", cert.pem()), ("server.key", key.serialize_pem())] {
        let path = Path::new(&data).join(file);
        std::fs::write(&path, pem).unwrap();
        // PostgreSQL refuses a key others may read.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(owner)), None).unwrap();
    }
    let hba: String = sqlx::query_scalar("SHOW hba_file").fetch_one(&db.pool).await.unwrap();
    let rules = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(&hba, format!("hostnossl all {role} 127.0.0.1/32 reject\n{rules}")).unwrap();
    for sql in ["ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()"] {
        sqlx::query(sql).execute(&db.pool).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_tls_works_and_plain_or_untrusted_connections_are_refused() {
    let db = setup(&["OrderPlaced"]).await;
    let url = db.pg.create_password_login("tlsuser", "tlspassword42").await.unwrap();
    let (ca_pem, issuer) = ca("highwater-test-ca");
    let (other_pem, _) = ca("someone-else");
    enable_tls(&db, &issuer, "tlsuser").await;
    let dir = tempfile::tempdir().unwrap();
    let (ca_file, other_file) = (dir.path().join("ca.crt"), dir.path().join("other.crt"));
    std::fs::write(&ca_file, ca_pem).unwrap();
    std::fs::write(&other_file, other_pem).unwrap();

    let plain = format!("{url}?sslmode=disable");
    let e = db::connect(&plain, 1).await.expect_err("plain connections are refused").to_string();
    assert!(e.contains("no encryption") || e.contains("pg_hba.conf"), "{e}");
    let untrusted = format!("{url}?sslmode=verify-full&sslrootcert={}", other_file.display());
    let e = db::connect(&untrusted, 1).await.expect_err("an unknown CA is refused").to_string();
    assert!(e.to_lowercase().contains("certificate"), "{e}");

    let tls = format!("{url}?sslmode=verify-full&sslrootcert={}", ca_file.display());
    let pool = db::connect(&tls, 2).await.unwrap();
    let ssl: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetch_one(&pool).await.unwrap();
    assert!(ssl, "the session is encrypted");

    sqlx::raw_sql("CREATE TABLE seen (event_id bigint PRIMARY KEY)").execute(&db.pool).await.unwrap();
    apply(&db.pool, &consumer("tally", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen VALUES ($2)'}}"))
        .await;
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("order", "1", "OrderPlaced", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&tls, "tls-0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM seen", 1, Duration::from_secs(30)).await;
    let encrypted = scalar_i64(
        &db.pool,
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'tlsuser' AND s.ssl",
    )
    .await;
    assert!(encrypted >= 1, "the dispatcher's sessions are encrypted");
    let out = std::process::Command::new(bin()).args(["consumer", "list"]).env("DATABASE_URL", &tls).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("tally"), "{out:?}");
}
