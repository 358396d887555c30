//! The web console (issue 47) against a real PostgreSQL and a real dispatcher process: the
//! store's dead-letter pages by key and filter; over real HTTP, a hostile payload and error shown
//! as text, the CSP, an action refused without a user and with a forged CSRF token, a login with
//! an ops token, and a poison event redriven from the page and delivered exactly once, audited
//! with the console user; a discard refused without its confirmation; a trusted proxy's user.
mod common;

use std::{net::SocketAddr, time::Duration};

use common::*;
use highwater::{NewEvent, append};
use highwater_console::Auth;
use highwater_store::console::dead_letters::{self, Filter, State};
use serde_json::json;
use sqlx::PgPool;

const HOSTILE: &str = "<img src=x onerror=alert(1)>";
const TOKEN: &str = "console-test-token";

/// Poison: a payload that is not an object, or `{"poison": true}`, while `verdict` has a row.
const SETUP: &str = "
    CREATE TABLE verdict (msg text);
    INSERT INTO verdict VALUES ('rejected');
    CREATE FUNCTION check_poison(p jsonb) RETURNS boolean LANGUAGE plpgsql AS $$
    DECLARE m text;
    BEGIN
        IF jsonb_typeof(p) <> 'object' OR (p->>'poison')::bool THEN
            SELECT msg INTO m FROM verdict LIMIT 1;
            IF m IS NOT NULL THEN RAISE EXCEPTION '% %', m, p #>> '{}'; END IF;
        END IF;
        RETURN true;
    END $$;
    CREATE TABLE seen (event_id bigint);";

fn skip_consumer(name: &str) -> String {
    consumer(
        name,
        "delivery: Shared\nerrorMode: skip\nmaxAttempts: 1\nbackoff: {initial: 50ms, max: 100ms}\n\
         sink: {sql: {statement: \"INSERT INTO seen SELECT $2 WHERE check_poison($1)\"}}",
    )
}

async fn append_one(pool: &PgPool, ty: &str, payload: serde_json::Value) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("order", "o-1", ty, payload)).await.unwrap();
    tx.commit().await.unwrap();
    id
}

async fn seen(pool: &PgPool, id: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM seen WHERE event_id = $1").bind(id).fetch_one(pool).await.unwrap()
}

/// Consumer `a` with three dead letters (one the hostile string, two `Bad`), two delivered
/// events, and its dispatcher.
struct Parked {
    db: TestDb,
    hostile: i64,
    bad: [i64; 2],
    _logs: tempfile::TempDir,
    _d: Dispatcher,
}

async fn parked() -> Parked {
    let db = shared(&["Tick", "Bad"]).await;
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    apply(&db.pool, &skip_consumer("a")).await;
    append_one(&db.pool, "Tick", json!({"n": 1})).await;
    let hostile = append_one(&db.pool, "Tick", json!(HOSTILE)).await;
    let b1 = append_one(&db.pool, "Bad", json!({"poison": true, "n": 2})).await;
    let b2 = append_one(&db.pool, "Bad", json!({"poison": true, "n": 3})).await;
    append_one(&db.pool, "Tick", json!({"n": 4})).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "c0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM highwater.dead_letters", 3, Duration::from_secs(30)).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 2, Duration::from_secs(30)).await;
    Parked { db, hostile, bad: [b1, b2], _logs: logs, _d: d }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_pages_dead_letters_by_key_and_filters_them() {
    let p = parked().await;
    let pool = &p.db.pool;
    let all = Filter::default();
    let first = dead_letters::page(pool, &all, None, 2).await.unwrap();
    assert_eq!(first.rows.iter().map(|r| r.event_id).collect::<Vec<_>>(), vec![p.hostile, p.bad[0]]);
    let next = first.next.clone().expect("a third dead letter is on a next page");
    let second = dead_letters::page(pool, &all, Some(&next), 2).await.unwrap();
    assert_eq!(second.rows.iter().map(|r| r.event_id).collect::<Vec<_>>(), vec![p.bad[1]]);
    assert!(second.next.is_none(), "the last page says so");
    assert_eq!(second.rows[0].payload, Some(json!({"poison": true, "n": 3})), "the payload comes with the row");

    let by_type = Filter { event_type: Some("Bad".into()), ..Filter::default() };
    assert_eq!(dead_letters::page(pool, &by_type, None, 50).await.unwrap().rows.len(), 2);
    let by_error = Filter { error_contains: Some("onerror".into()), ..Filter::default() };
    let hits = dead_letters::page(pool, &by_error, None, 50).await.unwrap().rows;
    assert_eq!(hits.iter().map(|r| r.event_id).collect::<Vec<_>>(), vec![p.hostile]);
    let other = Filter { consumer: Some("nobody".into()), ..Filter::default() };
    assert!(dead_letters::page(pool, &other, None, 50).await.unwrap().rows.is_empty());
    let redriven = Filter { state: Some(State::Redriven), ..Filter::default() };
    assert!(dead_letters::page(pool, &redriven, None, 50).await.unwrap().rows.is_empty());
    assert_eq!(dead_letters::keys(pool, &all, 2).await.unwrap().len(), 2, "keys stops at its maximum");
}

/// The console's router on a loopback port of its own.
async fn console(pool: &PgPool, auth: Auth) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = highwater_console::router(pool.clone(), auth).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

fn cookie_of(r: &reqwest::Response) -> String {
    let set = r.headers().get("set-cookie").expect("a Set-Cookie").to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "the cookie is HttpOnly, SameSite=Strict: {set}"
    );
    set.split(';').next().unwrap().to_owned()
}

fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a CSRF field") + "name=\"csrf\" value=\"".len();
    html[at..at + 64].to_owned()
}

async fn get(c: &reqwest::Client, url: &str, cookie: &str) -> (u16, String) {
    let r = c.get(url).header("cookie", cookie).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn post(c: &reqwest::Client, url: &str, cookie: &str, form: &[(&str, String)]) -> (u16, String) {
    let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    let r = c
        .post(url)
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn key(id: i64) -> String {
    serde_json::to_string(&("a", "__shared__", id)).unwrap()
}

async fn redrive_requested(pool: &PgPool, id: i64) -> Option<(String, Option<String>)> {
    sqlx::query_as("SELECT redrive_by, redrive_reason FROM highwater.dead_letters WHERE event_id = $1 AND redrive_requested_at IS NOT NULL")
        .bind(id)
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_escape_payloads_refuse_unauthenticated_and_forged_actions_and_redrive_exactly_once() {
    let p = parked().await;
    let pool = &p.db.pool;
    let auth = Auth { ops_tokens: vec!["other".into(), TOKEN.into()], ..Auth::default() };
    let base = console(pool, auth).await;
    let c = client();

    // Read-only without a login; the hostile payload and error are text.
    let r = c.get(format!("{base}/dead-letters")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers().get("content-security-policy").unwrap().to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe"), "no inline scripts: {csp}");
    let anon = cookie_of(&r);
    let html = r.text().await.unwrap();
    assert!(!html.contains(HOSTILE), "the hostile payload is never markup");
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"), "it shows as text");
    assert!(!html.contains("type=\"checkbox\""), "nothing to select without a user");
    let anon_csrf = csrf_of(&html);

    // An action without a user: 401, nothing changed.
    let act = |csrf: String, what: &str| {
        vec![("csrf", csrf), ("do", what.to_owned()), ("key", key(p.hostile)), ("reason", "fixed".to_owned())]
    };
    let (status, body) =
        post(&c, &format!("{base}/dead-letters/execute"), &anon, &act(anon_csrf.clone(), "redrive-selection")).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("log in with an ops token"), "{body}");
    assert_eq!(redrive_requested(pool, p.hostile).await, None);

    // A wrong token does not log in; the second token does, under a new cookie.
    let (status, _) =
        post(&c, &format!("{base}/login"), &anon, &[("csrf", anon_csrf.clone()), ("token", "nope".into())]).await;
    assert_eq!(status, 401);
    let r = c
        .post(format!("{base}/login"))
        .header("cookie", &anon)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={anon_csrf}&token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let user = cookie_of(&r);
    assert_ne!(user, anon, "a login gets a new cookie");
    let (_, html) = get(&c, &format!("{base}/dead-letters"), &user).await;
    assert!(html.contains("console:ops-token-2"), "the page says who acts");
    let csrf = csrf_of(&html);
    assert_ne!(csrf, anon_csrf);

    // A forged CSRF token, and the token of another cookie: 403, nothing changed.
    let forged = "0".repeat(64);
    for bad in [forged, anon_csrf.clone()] {
        let (status, body) =
            post(&c, &format!("{base}/dead-letters/execute"), &user, &act(bad, "redrive-selection")).await;
        assert_eq!(status, 403, "{body}");
    }
    assert_eq!(redrive_requested(pool, p.hostile).await, None);

    // A discard without its confirmation: refused by the operation (409), nothing changed.
    let (status, body) =
        post(&c, &format!("{base}/dead-letters/execute"), &user, &act(csrf.clone(), "discard-selection")).await;
    assert_eq!(status, 409, "{body}");
    let discarded: bool =
        sqlx::query_scalar("SELECT discarded_at IS NOT NULL FROM highwater.dead_letters WHERE event_id = $1")
            .bind(p.hostile)
            .fetch_one(pool)
            .await
            .unwrap();
    assert!(!discarded);

    // The fix, the dry run's count, then the redrive: delivered once, audited with the console user.
    sqlx::query("DELETE FROM verdict").execute(pool).await.unwrap();
    let (status, body) =
        post(&c, &format!("{base}/dead-letters/preview"), &user, &act(csrf.clone(), "redrive-selection")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("This would redrive <strong>1</strong>"), "{body}");
    assert_eq!(redrive_requested(pool, p.hostile).await, None, "a dry run changes nothing");
    let mut confirmed = act(csrf.clone(), "redrive-selection");
    confirmed.push(("confirm", "yes".into()));
    let (status, body) = post(&c, &format!("{base}/dead-letters/execute"), &user, &confirmed).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("redrive of <strong>1</strong>"), "{body}");
    assert_eq!(redrive_requested(pool, p.hostile).await, Some(("console:ops-token-2".into(), Some("fixed".into()))));
    let pool2 = pool.clone();
    let id = p.hostile;
    eventually("the redriven event delivered", Duration::from_secs(30), || {
        let pool = pool2.clone();
        async move { seen(&pool, id).await == 1 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(seen(pool, p.hostile).await, 1, "delivered exactly once");
    assert_eq!(seen(pool, p.bad[0]).await, 0, "only the selection was redriven");

    // Redriving the same again is refused by the operation (not dead any more), nothing delivered twice.
    let (status, body) = post(&c, &format!("{base}/dead-letters/execute"), &user, &confirmed).await;
    assert_eq!(status, 200);
    assert!(body.contains("Refused (1)"), "{body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen(pool, p.hostile).await, 1);

    // The overview shows the consumer, escaped, with the fence's line.
    let (status, html) = get(&c, &format!("{base}/"), &user).await;
    assert_eq!(status, 200);
    assert!(html.contains("href=\"/consumers/a\"") && html.contains("The fence holds nothing back"), "{html}");
    let (status, _) = get(&c, &format!("{base}/consumers/nobody"), &user).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_header_is_believed_only_from_a_trusted_proxy() {
    let db = shared(&["Tick"]).await;
    let trusted = Auth {
        trusted_user_header: Some("X-Forwarded-User".into()),
        trusted_proxies: vec!["127.0.0.0/8".parse().unwrap()],
        ..Auth::default()
    };
    let elsewhere = Auth { trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()], ..trusted.clone() };
    let c = client();
    let html = c.get(console(&db.pool, trusted).await).header("x-forwarded-user", "alice").send().await.unwrap();
    assert!(html.text().await.unwrap().contains("Acting as <strong>console:alice</strong>"));
    let html = c.get(console(&db.pool, elsewhere).await).header("x-forwarded-user", "alice").send().await.unwrap();
    let html = html.text().await.unwrap();
    assert!(!html.contains("console:alice"), "a header from an untrusted address is ignored");
    let readonly = c.get(console(&db.pool, Auth::default()).await).send().await.unwrap().text().await.unwrap();
    assert!(readonly.contains("This console is read-only"), "no auth configured: read-only, and it says so");
    assert!(Auth { trusted_user_header: Some("X-Forwarded-User".into()), ..Auth::default() }.check().is_err());
}
