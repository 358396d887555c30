//! The operator started before its database: it answers /healthz, reports not ready on /readyz,
//! retries with backoff (and says so), and once the database appears becomes ready and reconciles
//! resources, without a restart.
mod common;

use std::time::Duration;

use common::*;
use highwater::embedded::{EmbeddedOptions, EmbeddedPostgres, free_port};
use highwater_e2e::ControlPlane;

const CONSUMER: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: late, namespace: default}
spec:
  delivery: Shared
  sink: {log: {target: stderr}}
"#;

async fn status(port: u16, path: &str) -> Option<(u16, String)> {
    let r = reqwest::get(format!("http://127.0.0.1:{port}{path}")).await.ok()?;
    Some((r.status().as_u16(), r.text().await.ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_the_database_and_recovers_without_a_restart() {
    let cp = ControlPlane::start().await.expect("control plane");
    cp.kubectl_ok(["apply", "-f", crd_path().to_str().unwrap()]).await.unwrap();
    cp.kubectl_ok(["wait", "--for", "condition=established", "crd/eventconsumers.highwater.dev", "--timeout=60s"])
        .await
        .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let pg_port = free_port().unwrap();
    let url = format!("postgres://postgres@127.0.0.1:{pg_port}/postgres");
    let mut op = Operator::start_at(&cp, &url, logs.path(), "early", &["--leader-election", "false", "--migrate"]);
    let port = op.port;

    eventually("/healthz while the database is unreachable", Duration::from_secs(30), || async move {
        status(port, "/healthz").await.is_some_and(|(code, _)| code == 200)
    })
    .await;
    let (code, body) = status(port, "/readyz").await.unwrap();
    assert_eq!(code, 503, "not ready without a database: {body}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status(port, "/readyz").await.unwrap().0, 503);
    assert!(op.log().contains("database not reachable yet"), "it says why it waits:\n{}", op.log());
    assert!(op.child.try_wait().unwrap().is_none(), "still running, retrying:\n{}", op.log());

    // The database appears: the same process migrates it, becomes ready and reconciles.
    let pg = EmbeddedPostgres::start(EmbeddedOptions { port: Some(pg_port), ..Default::default() }).await.unwrap();
    let log = op.log.clone();
    eventually("/readyz once the database answers", Duration::from_secs(60), || async move {
        status(port, "/readyz").await.is_some_and(|(code, _)| code == 200)
    })
    .await;
    let pool = highwater::db::connect(&pg.url(), 2).await.unwrap();
    let w = World { cp, pool: pool.clone(), url: pg.url(), logs, pg };
    let applied = apply(&w, CONSUMER).await;
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    eventually("the consumer's row", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM highwater.consumers WHERE name = 'late'")
                .fetch_one(&pool)
                .await
                .unwrap()
                == 1
        }
    })
    .await;
    assert!(op.child.try_wait().unwrap().is_none(), "the same process: {}", std::fs::read_to_string(log).unwrap());
    assert_eq!(op.stop(), Some(0), "a clean exit on SIGTERM");
}
