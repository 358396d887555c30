//! The nats sink against a real `nats-server` 2.15 with JetStream (see
//! `highwater_e2e::brokers::nats`) and a real `highwater dispatch` process, read back from the
//! stream: every event present, `Nats-Msg-Id` = the event id, each stream's events in order,
//! headers intact; across a server SIGKILL and restart and a network cut (through
//! `highwater_e2e::proxy`); a subject no stream captures and a wrong password each named in
//! `last_error` and dead after `maxAttempts`.
//!
//! Needs `highwater` built in the target directory and Go (`.ci/run` makes sure of both).
mod relay;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use async_nats::jetstream::{self, stream};
use highwater_e2e::{
    brokers::nats::{Nats, NatsOptions},
    proxy::{Mode, Proxy},
};
use relay::*;

const USER: &str = "relay";
const PASSWORD: &str = "nats-secret";

struct Msg {
    sequence: u64,
    subject: String,
    value: serde_json::Value,
    headers: BTreeMap<String, String>,
}

/// Every message of the stream, in stream order.
async fn read_stream(url: &str) -> Vec<Msg> {
    let client = async_nats::ConnectOptions::new()
        .user_and_password(USER.into(), PASSWORD.into())
        .connect(url)
        .await
        .expect("connect");
    let js = jetstream::new(client);
    let stream = js.get_stream("EVENTS").await.expect("the stream");
    let last = stream.get_info().await.expect("stream info").state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        let m = stream.get_raw_message(seq).await.expect("message");
        let headers = m
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.first().map(|v| v.to_string()).unwrap_or_default()))
            .collect();
        out.push(Msg {
            sequence: m.sequence,
            subject: m.subject.to_string(),
            value: serde_json::from_slice(&m.payload).expect("JSON payload"),
            headers,
        });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_reaches_jetstream_once_across_kill_and_cut() {
    let port = highwater::embedded::free_port().unwrap();
    let proxy = Proxy::start(format!("127.0.0.1:{port}").parse().unwrap()).await.unwrap();
    let mut nats =
        Nats::start(NatsOptions { port: Some(port), user: Some((USER.into(), PASSWORD.into())), ..Default::default() })
            .await
            .expect("start nats-server");
    let client = async_nats::ConnectOptions::new()
        .user_and_password(USER.into(), PASSWORD.into())
        .connect(nats.url())
        .await
        .expect("connect");
    jetstream::new(client)
        .create_stream(stream::Config {
            name: "EVENTS".into(),
            subjects: vec!["events.>".into()],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .expect("create the stream");

    let db = db().await;
    let through_proxy = format!("nats://127.0.0.1:{}", proxy.port());
    let sink = |subject: &str, password_env: &str| {
        format!(
            "sink:\n  nats:\n    servers: [\"{through_proxy}\"]\n    subject: \"{subject}\"\n    timeout: 2s\n    \
             username: {USER}\n    password: {{env: {password_env}}}\n    headers: {{x-team: billing}}\n"
        )
    };
    apply(
        &db,
        "relay",
        &format!(
            "delivery: Shared\nbatchSize: 50\nmaxAttempts: 1000\nbackoff: {{initial: 100ms, max: 1s}}\n{}",
            sink("events.{streamType}.{eventType}", "NATS_PASSWORD")
        ),
    )
    .await;
    let quick = "delivery: Shared\nbatchSize: 50\nmaxAttempts: 3\nbackoff: {initial: 100ms, max: 200ms}\n";
    apply(&db, "nostream", &format!("{quick}{}", sink("other.{streamType}", "NATS_PASSWORD"))).await;
    apply(&db, "badauth", &format!("{quick}{}", sink("events.bad", "NATS_WRONG_PASSWORD"))).await;
    let logs = tempfile::tempdir().unwrap();
    let _dispatcher =
        dispatcher(&db.url, logs.path(), &[("NATS_PASSWORD", PASSWORD), ("NATS_WRONG_PASSWORD", "not-the-secret")]);
    let mut writer = Writer::new(&db.pool, 20);
    let mut ids = writer.append(200, Duration::ZERO).await;

    let nostream = wait_dead(&db.pool, "nostream", Duration::from_secs(60)).await;
    eprintln!("no stream: {nostream:?}");
    let e = nostream.last_error.unwrap();
    assert!(e.contains("no JetStream stream captures the subject") && e.contains("other.order"), "{e}");
    assert_eq!(nostream.attempts, 3);
    let bad = wait_dead(&db.pool, "badauth", Duration::from_secs(60)).await;
    eprintln!("bad credentials: {bad:?}");
    let e = bad.last_error.unwrap();
    assert!(e.contains("authorization violation") && e.contains("check sink.nats username/password"), "{e}");
    assert!(!e.contains("not-the-secret"), "{e}");

    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(60)).await;

    // The server SIGKILLed mid-relay, then restarted on the same port and store.
    let mut w = writer.clone();
    let writing = tokio::spawn(async move { w.append(200, Duration::from_millis(3)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    nats.kill();
    let during = wait_error(&db.pool, "relay", "nats:", Duration::from_secs(30)).await;
    eprintln!("server killed: {during:?}");
    assert_ne!(during.status, "dead");
    nats.restart().await.expect("restart nats-server");
    let restarted = std::time::Instant::now();
    ids.extend(writing.await.unwrap());
    writer.skip(200);
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(90)).await;
    eprintln!("caught up {:.1}s after the server restarted", restarted.elapsed().as_secs_f64());

    // The network cut.
    proxy.set_mode(Mode::Cut);
    ids.extend(writer.append(100, Duration::from_millis(3)).await);
    let cut = wait_error(&db.pool, "relay", "nats:", Duration::from_secs(30)).await;
    eprintln!("network cut: {cut:?}");
    proxy.set_mode(Mode::Pass);
    let healed = std::time::Instant::now();
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(90)).await;
    eprintln!("caught up {:.1}s after the network came back", healed.elapsed().as_secs_f64());

    let msgs = read_stream(&nats.url()).await;
    let expected: BTreeSet<i64> = ids.iter().copied().collect();
    let mut seen = BTreeSet::new();
    let mut next: BTreeMap<String, i64> = BTreeMap::new();
    for m in &msgs {
        let id: i64 = m.headers["highwater-event-id"].parse().unwrap();
        assert_eq!(m.headers["Nats-Msg-Id"], id.to_string(), "seq {}", m.sequence);
        if !seen.insert(id) {
            continue;
        }
        let stream = m.headers["highwater-stream-id"].clone();
        let seq = m.value["seq"].as_i64().unwrap();
        let due = next.entry(stream.clone()).or_insert(1);
        assert_eq!(seq, *due, "stream {stream}: version {seq} where {due} was due");
        *due += 1;
        assert_eq!(m.subject, "events.order.OrderPlaced");
        assert_eq!(m.headers["highwater-stream-version"], seq.to_string());
        assert_eq!(m.headers["x-team"], "billing");
        check_trace(&m.headers);
    }
    assert_eq!(seen, expected, "every event once in the stream");
    let dups = msgs.len() - seen.len();
    eprintln!("{} messages for {} events after one kill and one cut", msgs.len(), ids.len());
    // The duplicate window drops a redelivery of the same Nats-Msg-Id: none expected, two
    // interruptions of one batch at most tolerated (a window lost with the killed server).
    assert!(dups <= 2 * 50, "{dups} duplicates");
}

/// TLS to the server (`tls.caFile`): trusted, every event arrives; without the CA the
/// handshake failure is named and the shard is dead after `maxAttempts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_server_with_a_ca_file() {
    let certs = tempfile::tempdir().unwrap();
    let pki = highwater_e2e::pki::Pki::generate(certs.path(), &["127.0.0.1", "localhost"]).unwrap();
    let nats = Nats::start(NatsOptions { tls: Some((pki.serving_cert(), pki.serving_key())), ..Default::default() })
        .await
        .expect("start nats-server");
    let url = format!("tls://127.0.0.1:{}", nats.port());
    let client = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(pki.ca_cert())
        .connect(&url)
        .await
        .expect("connect over TLS");
    let js = jetstream::new(client);
    js.create_stream(stream::Config { name: "EVENTS".into(), subjects: vec!["events.>".into()], ..Default::default() })
        .await
        .expect("create the stream");
    let db = db().await;
    let ca = pki.ca_cert();
    apply(
        &db,
        "relay",
        &format!(
            "delivery: Shared\nbatchSize: 50\nsink:\n  nats:\n    servers: [\"{url}\"]\n    subject: events.tls\n    \
             tls: {{caFile: \"{}\"}}\n",
            ca.display()
        ),
    )
    .await;
    apply(
        &db,
        "untrusted",
        &format!(
            "delivery: Shared\nmaxAttempts: 2\nbackoff: {{initial: 100ms, max: 200ms}}\nsink:\n  nats:\n    \
             servers: [\"{url}\"]\n    subject: events.untrusted\n    tls: {{}}\n"
        ),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let _dispatcher = dispatcher(&db.url, logs.path(), &[]);
    let ids = Writer::new(&db.pool, 10).append(100, Duration::ZERO).await;
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(60)).await;
    let info = js.get_stream("EVENTS").await.unwrap().get_info().await.unwrap();
    assert_eq!(info.state.messages, ids.len() as u64, "every event once in the stream");
    let untrusted = wait_dead(&db.pool, "untrusted", Duration::from_secs(60)).await;
    eprintln!("untrusted CA: {untrusted:?}");
    let e = untrusted.last_error.unwrap();
    assert!(e.contains("cannot connect") && e.contains("check sink.nats.tls"), "{e}");
}

/// Token authentication (`nats-server --auth`): the sink's token, read from the dispatcher's
/// environment, delivers every event; a wrong token is named in `last_error` (never shown) and
/// the shard is `dead` after `maxAttempts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_authentication() {
    const TOKEN: &str = "nats-token-secret";
    let nats = Nats::start(NatsOptions { token: Some(TOKEN.into()), ..Default::default() }).await.expect("nats");
    let client = async_nats::ConnectOptions::new().token(TOKEN.into()).connect(nats.url()).await.expect("connect");
    let js = jetstream::new(client);
    js.create_stream(stream::Config { name: "TOKENS".into(), subjects: vec!["tok.>".into()], ..Default::default() })
        .await
        .expect("create the stream");
    let db = db().await;
    let sink = |env: &str| {
        format!(
            "sink:\n  nats:\n    servers: [\"{}\"]\n    subject: tok.{{streamType}}\n    timeout: 2s\n    \
             token: {{env: {env}}}\n",
            nats.url()
        )
    };
    apply(
        &db,
        "relay",
        &format!("delivery: Shared\nbatchSize: 20\nbackoff: {{initial: 100ms, max: 1s}}\n{}", sink("NATS_TOKEN")),
    )
    .await;
    let quick = "delivery: Shared\nbatchSize: 20\nmaxAttempts: 2\nbackoff: {initial: 100ms, max: 200ms}\n";
    apply(&db, "badtoken", &format!("{quick}{}", sink("NATS_WRONG_TOKEN"))).await;
    let logs = tempfile::tempdir().unwrap();
    let _dispatcher = dispatcher(&db.url, logs.path(), &[("NATS_TOKEN", TOKEN), ("NATS_WRONG_TOKEN", "not-the-token")]);
    let ids = Writer::new(&db.pool, 5).append(60, Duration::ZERO).await;

    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(60)).await;
    let stream = js.get_stream("TOKENS").await.expect("the stream");
    assert_eq!(stream.get_info().await.expect("stream info").state.messages, 60, "one message per event");
    let bad = wait_dead(&db.pool, "badtoken", Duration::from_secs(60)).await;
    eprintln!("bad token: {bad:?}");
    let e = bad.last_error.unwrap();
    assert!(e.contains("authorization violation") && e.contains("token"), "{e}");
    assert!(!e.contains("not-the-token"), "the token is never shown: {e}");
    assert_eq!(bad.attempts, 2);
}
