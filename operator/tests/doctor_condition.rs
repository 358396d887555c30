//! The operator runs `highwater doctor` and shows it on every EventConsumer as the
//! `DatabaseHealthy` condition: True on a healthy database, False naming the finding and its fix
//! while a transaction pins the fence, True again once it ends.
mod common;

use std::time::Duration;

use common::*;

async fn healthy(w: &World, field: &str) -> String {
    let path = format!("jsonpath={{.status.conditions[?(@.type==\"DatabaseHealthy\")].{field}}}");
    w.cp.kubectl_ok(["get", "ec", "watched", "-n", "shop", "-o", &path]).await.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_healthy_shows_a_transaction_pinning_the_fence_with_its_fix() {
    let w = world(&["Tick"]).await;
    // The operator's own role from `highwater roles --print`: doctor warns about a superuser.
    let script = highwater::roles::Roles::default().script();
    for part in [script.before_migrate, script.after_migrate] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(part)).execute(&w.pool).await.unwrap();
    }
    let operator_url = format!("postgres://highwater_operator@127.0.0.1:{}/postgres", w.pg.port());
    let args = ["--leader-election", "false", "--doctor-interval", "1s", "--doctor-long-transaction", "2s"];
    let op = Operator::start_at(&w.cp, &operator_url, w.logs.path(), "op-doctor", &args);
    let ec = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: watched, namespace: shop}
spec:
  delivery: Shared
  sink: {log: {}}
"#;
    assert!(apply(&w, ec).await.status.success());
    eventually("DatabaseHealthy True", Duration::from_secs(60), || async { healthy(&w, "status").await == "True" })
        .await;
    assert_eq!(healthy(&w, "reason").await, "DoctorOk", "{}", healthy(&w, "message").await);

    // An application transaction that took an id and stays open: every consumer's fence stops at it.
    let mut pinning = w.pool.begin().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *pinning).await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()").execute(&mut *pinning).await.unwrap();
    eventually("DatabaseHealthy False", Duration::from_secs(30), || async { healthy(&w, "status").await == "False" })
        .await;
    assert_eq!(healthy(&w, "reason").await, "DoctorWarnings");
    let message = healthy(&w, "message").await;
    assert!(message.contains("fence") && message.contains(&pid.to_string()), "names the holder: {message}");
    assert!(message.contains("fix: "), "says what to do: {message}");
    // Its role has pg_read_all_stats (from the printed grants): it sees how long, not only who.
    assert!(message.contains("in a transaction for"), "sees the holder's age: {message}");
    assert!(op.log().contains("highwater doctor"), "the change is logged:\n{}", op.log());

    pinning.commit().await.unwrap();
    eventually("DatabaseHealthy True again", Duration::from_secs(30), || async {
        healthy(&w, "status").await == "True"
    })
    .await;
}
