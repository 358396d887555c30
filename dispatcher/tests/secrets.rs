//! Secrets stay in the process that holds them. A dispatcher runs with a database password (real
//! scram-sha-256 authentication), a webhook signing secret and an SSE token, through failures that
//! produce error messages (a receiver answering 500, a wrong token, an unreachable database); then
//! every place an operator could read — the logs, /metrics, /readyz, `consumer list` and `status`
//! (table and JSON), the shard rows and the stored definitions, CLI errors — is searched for each
//! secret.
mod common;

use std::{
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, extract::State, http::HeaderMap, routing::post};
use base64::{Engine, engine::general_purpose::STANDARD};
use common::*;
use highwater::{NewEvent, append, db};
use highwater_testkit::TestCluster;
use rand::RngExt;
use serde_json::json;

/// A receiver that fails its first `fail` requests, then records the signature headers it gets.
#[derive(Default)]
struct Hook {
    seen: Mutex<usize>,
    signatures: Mutex<Vec<String>>,
}

async fn receive(State(hook): State<Arc<(Hook, usize)>>, headers: HeaderMap) -> (axum::http::StatusCode, String) {
    let (hook, fail) = &*hook;
    let mut seen = hook.seen.lock().unwrap();
    *seen += 1;
    if *seen <= *fail {
        return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "receiver down for maintenance".into());
    }
    let sig = headers.get("webhook-signature").and_then(|v| v.to_str().ok()).unwrap_or_default();
    hook.signatures.lock().unwrap().push(sig.to_owned());
    (axum::http::StatusCode::OK, "ok".into())
}

fn alphanumeric(n: usize) -> String {
    let mut rng = rand::rng();
    (0..n).map(|_| char::from(rng.sample(rand::distr::Alphanumeric))).collect()
}

fn cli(url: &str, args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).env("DATABASE_URL", url).output().expect("run highwater");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_out_of_logs_metrics_status_and_errors() {
    let db = setup(&["OrderPlaced"]).await;
    let password = alphanumeric(24);
    let url = db.pg.create_password_login("app", &password).await.unwrap();
    let wrong = url.replace(&password, "NotThePassword");
    let refused = db::connect(&wrong, 1).await.expect_err("a wrong password is refused").to_string();
    assert!(refused.contains("password authentication failed"), "authentication is real: {refused}");

    let key: [u8; 32] = rand::random();
    let key_b64 = STANDARD.encode(key);
    let hook_secret = format!("whsec_{key_b64}");
    let sse_token = alphanumeric(32);

    let hook = Arc::new((Hook::default(), 2));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = Router::new().route("/hook", post(receive)).with_state(hook.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    apply(
        &db.pool,
        &[
            consumer(
                "signed",
                &format!(
                    "delivery: Shared\nbackoff: {{initial: 50ms, max: 100ms}}\n\
                     sink: {{webhook: {{url: '{hook_url}', secret: {{env: HOOK_SECRET}}}}}}"
                ),
            ),
            consumer("live", "delivery: PerInstance\nsink: {sse: {}}"),
        ]
        .concat(),
    )
    .await;
    for n in 0..3 {
        let mut tx = db.pool.begin().await.unwrap();
        append(&mut tx, &NewEvent::new("order", "1", "OrderPlaced", json!({"n": n}))).await.unwrap();
        tx.commit().await.unwrap();
    }

    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(
        &url,
        "p0",
        logs.path(),
        &[("HOOK_SECRET", hook_secret.as_str()), ("HIGHWATER_SSE_TOKENS", sse_token.as_str())],
    );
    eventually("three signed deliveries", Duration::from_secs(60), || async {
        hook.0.signatures.lock().unwrap().len() >= 3
    })
    .await;
    assert!(hook.0.signatures.lock().unwrap().iter().all(|s| s.starts_with("v1,")), "the secret was used");

    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{}", d.http_port);
    let stream = format!("{base}/v1/consumers/live/events");
    let ok = http.get(&stream).bearer_auth(&sse_token).send().await.unwrap();
    assert_eq!(ok.status(), 200, "the SSE token was loaded");
    drop(ok);
    let denied = http.get(&stream).bearer_auth(format!("{sse_token}x")).send().await.unwrap();
    assert_eq!(denied.status(), 401);

    let mut seen: Vec<(String, String)> = Vec::new();
    seen.push(("a refused SSE client's answer".into(), denied.text().await.unwrap()));
    for path in ["/metrics", "/readyz", "/healthz"] {
        seen.push((path.into(), http.get(format!("{base}{path}")).send().await.unwrap().text().await.unwrap()));
    }
    for args in [
        &["consumer", "list"][..],
        &["consumer", "list", "--output", "json"],
        &["consumer", "status", "signed", "--output", "json"],
    ] {
        seen.push((format!("highwater {}", args.join(" ")), cli(&url, args)));
    }
    seen.push(("a CLI refused by the database".into(), cli(&url.replace(&password, "x"), &["consumer", "list"])));
    let closed = highwater::embedded::free_port().unwrap();
    let unreachable = url.replace(&format!(":{}/", db.pg.port()), &format!(":{closed}/"));
    seen.push(("a CLI without a database".into(), cli(&unreachable, &["consumer", "list"])));
    let stranded = Command::new(bin())
        .args(["dispatch", "--instance-id", "p1", "--connect-timeout", "2s", "--listen", "off"])
        .env("DATABASE_URL", &unreachable)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!stranded.status.success(), "a dispatcher without a database gives up after --connect-timeout");
    seen.push(("a dispatcher without a database".into(), String::from_utf8_lossy(&stranded.stderr).into_owned()));
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT coalesce(last_error, '') || ' ' || status FROM highwater.consumer_shards
         UNION ALL SELECT spec::text FROM highwater.consumers",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    seen.extend(rows.into_iter().map(|(r,)| ("the database's shard and consumer rows".into(), r)));
    assert_eq!(d.terminate(Duration::from_secs(15)), Some(0));
    let log = std::fs::read_to_string(logs.path().join("p0.log")).unwrap();
    assert!(log.contains("receiver down for maintenance"), "the failures were logged: {log}");
    seen.push(("the dispatcher's log".into(), log));

    let secrets = [
        ("the database password", password.as_str()),
        ("the webhook secret", hook_secret.as_str()),
        ("the webhook key", key_b64.as_str()),
        ("an SSE token", sse_token.as_str()),
    ];
    for (place, text) in &seen {
        for (what, secret) in secrets {
            assert!(!text.contains(secret), "{what} appears in {place}:\n{text}");
        }
    }
}
