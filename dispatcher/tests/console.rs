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
    assert!(
        html.contains("<h2 id=\"doctor\">Doctor</h2><p class=\"ok\">All 6 checks pass"),
        "doctor's findings: {html}"
    );
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

/// A console acting as `console:alice` through a trusted proxy (this test's loopback address),
/// with the browser's cookie and its CSRF token from `page`.
async fn as_alice(pool: &PgPool, page: &str) -> (String, reqwest::Client, String, String) {
    let auth = Auth {
        trusted_user_header: Some("X-Forwarded-User".into()),
        trusted_proxies: vec!["127.0.0.0/8".parse().unwrap()],
        ..Auth::default()
    };
    let base = console(pool, auth).await;
    let mut h = reqwest::header::HeaderMap::new();
    h.insert("x-forwarded-user", "alice".parse().unwrap());
    let c = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).default_headers(h).build().unwrap();
    let r = c.get(format!("{base}{page}")).send().await.unwrap();
    let cookie = cookie_of(&r);
    let csrf = csrf_of(&r.text().await.unwrap());
    (base, c, cookie, csrf)
}

async fn shard_state(pool: &PgPool, consumer: &str) -> (String, i64) {
    sqlx::query_as("SELECT status::text, cursor_id FROM highwater.consumer_shards WHERE consumer = $1")
        .bind(consumer)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_page_masks_secrets_and_its_actions_are_the_operations() {
    let db = shared(&["Tick"]).await;
    let pool = &db.pool;
    let spec = "delivery: Shared\nsink: {webhook: {url: 'https://hook:hunter2@hooks.example/in?sig=s3cr3t', \
                secret: {env: HOOK_SIGNING_SECRET}, headers: {Authorization: Bearer t0ken}}}";
    apply(pool, &consumer("hook", spec)).await;
    let ids = [
        append_one(pool, "Tick", json!({"n": 1})).await,
        append_one(pool, "Tick", json!({"n": 2})).await,
        append_one(pool, "Tick", json!({"n": 3})).await,
    ];
    let (base, c, cookie, csrf) = as_alice(pool, "/consumers/hook").await;
    let url = format!("{base}/consumers/hook/act");

    // The spec is shown, its secrets are not.
    let (status, html) = get(&c, &format!("{base}/consumers/hook"), &cookie).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("hooks.example/in") && html.contains("Authorization"), "the spec is shown: {html}");
    for secret in ["hunter2", "s3cr3t", "HOOK_SIGNING_SECRET", "t0ken"] {
        assert!(!html.contains(secret), "{secret} reached the browser");
    }
    assert!(html.contains("value=\"rewind\""), "a console user gets the actions");

    // Without a user, or with a forged CSRF token: refused, nothing changed.
    let anon = client().get(format!("{base}/consumers/hook")).send().await.unwrap();
    let anon_cookie = cookie_of(&anon);
    let anon_html = anon.text().await.unwrap();
    assert!(!anon_html.contains("value=\"rewind\""), "no actions without a user");
    let disable =
        |csrf: String| vec![("csrf", csrf), ("do", "disable".to_owned()), ("reason", "maintenance".to_owned())];
    let (status, _) = post(&client(), &url, &anon_cookie, &disable("0".repeat(64))).await;
    assert_eq!(status, 401);
    let (status, _) = post(&c, &url, &cookie, &disable("0".repeat(64))).await;
    assert_eq!(status, 403);
    assert_eq!(shard_state(pool, "hook").await.0, "idle");

    // disable, enable: the shard's state moves; enabling twice is refused as the CLI refuses it.
    let (status, body) = post(&c, &url, &cookie, &disable(csrf.clone())).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("eventconsumer/hook disabled"), "{body}");
    assert_eq!(shard_state(pool, "hook").await.0, "disabled");
    let enable = vec![("csrf", csrf.clone()), ("do", "enable".to_owned())];
    assert_eq!(post(&c, &url, &cookie, &enable).await.0, 200);
    assert_eq!(shard_state(pool, "hook").await.0, "idle");
    let (status, body) = post(&c, &url, &cookie, &enable).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("not disabled (nothing to do)"), "{body}");

    // A rewind forward past undelivered events asks the operation's question first (nothing
    // changed), then moves with the confirmation; a shard that is not dead is not restarted.
    sqlx::query("UPDATE highwater.consumer_shards SET status = 'disabled' WHERE consumer = 'hook'")
        .execute(pool)
        .await
        .unwrap();
    let rewind = vec![("csrf", csrf.clone()), ("do", "rewind".to_owned()), ("to", ids[1].to_string())];
    // The fence is the cluster's: another test's transaction may hold it for a moment.
    let mut answer = post(&c, &url, &cookie, &rewind).await;
    for _ in 0..100 {
        if !answer.1.contains("not below the fence yet") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = post(&c, &url, &cookie, &rewind).await;
    }
    let (status, body) = answer;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("skipping 1 undelivered event(s)") && body.contains("name=\"confirm\""), "{body}");
    assert_eq!(shard_state(pool, "hook").await, ("disabled".into(), 0), "asking changed nothing");
    let mut confirmed = rewind.clone();
    confirmed.push(("confirm", "yes".into()));
    let (status, body) = post(&c, &url, &cookie, &confirmed).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(shard_state(pool, "hook").await, ("disabled".into(), ids[0]), "just before the target event");
    let (status, body) = post(&c, &url, &cookie, &[("csrf", csrf.clone()), ("do", "restart".to_owned())]).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("is disabled, not dead"), "{body}");
    let (status, body) = post(&c, &url, &cookie, &[("csrf", csrf), ("do", "rebuild".to_owned())]).await;
    assert_eq!(status, 409, "a webhook consumer has no read model to rebuild: {body}");

    // Each change is in the audit with alice as who, and refusals are not; the page shows them.
    let audit: Vec<(String, Option<String>, String, Option<String>)> = sqlx::query_as(
        "SELECT action, detail, changed_by, reason FROM highwater.shard_changes WHERE consumer = 'hook' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let by = audit.first().map(|a| a.2.clone()).unwrap_or_default();
    assert!(by.contains("alice"), "the console user is who: {audit:?}");
    let changes: Vec<(&str, Option<&str>, Option<&str>)> =
        audit.iter().map(|a| (a.0.as_str(), a.1.as_deref(), a.3.as_deref())).collect();
    let to = format!("to event {}", ids[1]);
    assert_eq!(
        changes,
        [("disabled", None, Some("maintenance")), ("enabled", None, None), ("rewound", Some(to.as_str()), None)],
        "{audit:?}"
    );
    assert!(audit.iter().all(|a| a.2 == by), "{audit:?}");
    let (_, html) = get(&c, &format!("{base}/consumers/hook"), &cookie).await;
    let table = html.split("id=\"shard-changes\"").nth(1).expect("the shard changes table");
    assert!(table.contains(&to) && table.contains("maintenance") && table.contains(&by), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_and_event_type_pages_show_events_as_stored_and_upcast_with_their_links() {
    use highwater_store::event_types::{TypeSpec, VersionSpec, apply_type};
    let db = shared(&["Tick"]).await;
    let pool = &db.pool;
    let version = |version, upcast: Option<&str>| VersionSpec { version, schema: None, upcast: upcast.map(Into::into) };
    let priced = TypeSpec { event_type: "Priced".into(), versions: vec![version(1, None)], ..TypeSpec::default() };
    apply_type(pool, &priced).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let mut first = NewEvent::new("order", "o-9", "Priced", json!({"total": 5}));
    first.metadata = Some(json!({"correlation_id": "corr-77"}));
    let first_id = append(&mut tx, &first).await.unwrap();
    let mut second = NewEvent::new("order", "o-9", "Tick", json!(HOSTILE));
    second.metadata = Some(json!({"correlation_id": "corr-77", "causation_id": first_id.to_string()}));
    let second_id = append(&mut tx, &second).await.unwrap();
    tx.commit().await.unwrap();
    let two = TypeSpec {
        versions: vec![version(1, None), version(2, Some("payload || '{\"currency\": \"EUR\"}'"))],
        ..priced
    };
    apply_type(pool, &two).await.unwrap();
    let base = console(pool, Auth::default()).await;
    let c = client();

    let (status, html) = get(&c, &format!("{base}/streams?type=order&id=o-9"), "").await;
    assert_eq!(status, 200, "{html}");
    let (at_first, at_second) =
        (html.find(&format!("id=\"event-{first_id}\"")), html.find(&format!("id=\"event-{second_id}\"")));
    assert!(at_first.is_some() && at_first < at_second, "both, in order: {html}");
    assert!(html.contains("&quot;currency&quot;: &quot;EUR&quot;"), "the payload upcast to version 2: {html}");
    assert!(!html.contains(HOSTILE) && html.contains("&lt;img src=x"), "a payload is text");
    assert!(html.contains("href=\"/correlations/corr-77\""), "{html}");
    assert!(html.contains(&format!("href=\"/events/{first_id}\"")), "causation links the cause: {html}");
    let r = c.get(format!("{base}/events/{first_id}")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(to, format!("/streams?type=order&id=o-9#event-{first_id}"));
    let (_, html) = get(&c, &format!("{base}/correlations/corr-77"), "").await;
    assert_eq!(html.matches("href=\"/streams?type=order&amp;id=o-9#event-").count(), 2, "{html}");
    let (status, _) = get(&c, &format!("{base}/streams?type=order&id=nothing"), "").await;
    assert_eq!(status, 409, "a stream without events is refused with its fix");

    let (_, html) = get(&c, &format!("{base}/event-types"), "").await;
    assert!(html.contains("href=\"/event-types/Priced\"") && html.contains("href=\"/event-types/Tick\""), "{html}");
    let (status, html) = get(&c, &format!("{base}/event-types/Priced"), "").await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("payload || &#39;{") || html.contains("payload || '{"), "the upcast: {html}");
    let counts: Vec<&str> = html.match_indices("<td class=\"num\">").map(|(i, _)| &html[i + 16..i + 17]).collect();
    assert_eq!(counts, ["1", "1", "2", "0"], "version 1 holds the event, version 2 none: {html}");
    assert_eq!(get(&c, &format!("{base}/event-types/Nope"), "").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rare_filter_stops_each_page_at_its_scan_and_goes_on_from_there() {
    let db = shared(&["Tick"]).await;
    let pool = &db.pool;
    // More dead letters than one page scans; the only match is the last of them.
    let n = dead_letters::SCAN + 10_000;
    sqlx::query(
        "INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error)
         SELECT 'bulk', '__shared__', g, 1, CASE WHEN g = $1 THEN 'the needle' ELSE 'hay' END
           FROM generate_series(1, $1) g",
    )
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
    let f = Filter { error_contains: Some("needle".into()), ..Filter::default() };
    let first = dead_letters::page(pool, &f, None, 50).await.unwrap();
    assert!(first.rows.is_empty() && first.stopped_early, "stopped at its scan without a match");
    let next = first.next.expect("it says where to go on");
    assert_eq!(next.event_id, dead_letters::SCAN, "right after the last dead letter it looked at");
    let second = dead_letters::page(pool, &f, Some(&next), 50).await.unwrap();
    assert_eq!(second.rows.iter().map(|r| r.event_id).collect::<Vec<_>>(), vec![n]);
    assert!(second.next.is_none() && !second.stopped_early, "the end of the table");
    let keys = dead_letters::keys(pool, &f, 10).await.unwrap();
    assert_eq!(keys.iter().map(|k| k.event_id).collect::<Vec<_>>(), vec![n], "keys goes on past empty pages");
    let all = dead_letters::page(pool, &Filter { state: None, ..Filter::default() }, None, 50).await.unwrap();
    assert!(all.rows.len() == 50 && !all.stopped_early, "a dense filter fills its page");
}
