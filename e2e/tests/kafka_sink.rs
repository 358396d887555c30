//! The kafka sink against a real Apache Kafka 4.4 (KRaft, one process; see
//! `highwater_e2e::brokers::kafka`) and a real `highwater dispatch` process, read back with a real
//! Kafka consumer: every event present, one record per event id after de-duplication, each
//! stream's events in order on one partition, headers intact; across a broker SIGKILL and restart,
//! a network cut (through `highwater_e2e::proxy`), a missing topic and bad SCRAM credentials,
//! each named in the shard's `last_error`, retried, and dead after `maxAttempts`.
//!
//! Needs `highwater` built in the target directory, Java 17 and Maven (`.ci/run` installs them).
mod relay;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use highwater_e2e::{
    brokers::kafka::{Kafka, KafkaOptions},
    proxy::{Mode, Proxy},
};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{Consumer, StreamConsumer},
    message::Headers,
};
use relay::*;

const PARTITIONS: i32 = 3;

async fn create_topics(bootstrap: &str, topics: &[&str]) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("admin client");
    let new: Vec<NewTopic> = topics.iter().map(|t| NewTopic::new(t, PARTITIONS, TopicReplication::Fixed(1))).collect();
    for r in admin.create_topics(&new, &AdminOptions::new()).await.expect("create topics") {
        r.expect("topic created");
    }
}

#[derive(Debug, Clone)]
struct Record {
    partition: i32,
    offset: i64,
    key: Option<String>,
    value: serde_json::Value,
    headers: BTreeMap<String, String>,
}

impl Record {
    fn event_id(&self) -> i64 {
        self.headers["highwater-event-id"].parse().expect("a numeric event id")
    }
}

/// Every record of `topic` from the beginning, until `distinct` event ids have been seen and the
/// topic has been quiet for a second (so late duplicates are counted too).
async fn read_topic(bootstrap: &str, topic: &str, distinct: usize) -> Vec<Record> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("audit-{topic}"))
        .set("enable.auto.commit", "false")
        // Only what the producer committed (the sink does not use transactions; this is the
        // strictest reading a downstream consumer can choose).
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let mut ids = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let wait = if ids.len() >= distinct { Duration::from_secs(1) } else { Duration::from_secs(5) };
        match tokio::time::timeout(wait, consumer.recv()).await {
            Ok(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                (h.key.to_owned(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let r = Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    value: serde_json::from_slice(m.payload().unwrap_or_default()).expect("JSON value"),
                    headers,
                };
                ids.insert(r.event_id());
                out.push(r);
            }
            Ok(Err(e)) => panic!("reading {topic}: {e}"),
            Err(_) if ids.len() >= distinct => return out,
            Err(_) => {}
        }
        assert!(tokio::time::Instant::now() < deadline, "{topic}: {} of {distinct} event ids after 60 s", ids.len());
    }
}

/// Checks the read-back against the appended events: each present, duplicates at most `max_dup`,
/// per key the first occurrences in stream order, the headers those of the event.
fn audit(records: &[Record], ids: &[i64], max_dup: usize) {
    let expected: BTreeSet<i64> = ids.iter().copied().collect();
    let seen: BTreeSet<i64> = records.iter().map(Record::event_id).collect();
    let missing: Vec<_> = expected.difference(&seen).collect();
    assert!(missing.is_empty(), "events missing from the topic: {missing:?}");
    let unexpected: Vec<_> = seen.difference(&expected).collect();
    assert!(unexpected.is_empty(), "records of events never appended: {unexpected:?}");
    let dups = records.len() - seen.len();
    assert!(dups <= max_dup, "{dups} duplicate records, more than {max_dup}");
    // One stream, one key, one partition; in partition order (offsets) the first record of each
    // event has the stream's versions 1, 2, 3, ... with no gap.
    let mut by_partition: BTreeMap<i32, Vec<&Record>> = BTreeMap::new();
    for r in records {
        by_partition.entry(r.partition).or_default().push(r);
    }
    let mut partition_of: BTreeMap<String, i32> = BTreeMap::new();
    let mut next_seq: BTreeMap<String, i64> = BTreeMap::new();
    let mut first = BTreeSet::new();
    for (p, mut rs) in by_partition {
        rs.sort_by_key(|r| r.offset);
        for r in rs {
            let key = r.key.clone().expect("records are keyed by stream id");
            assert_eq!(*partition_of.entry(key.clone()).or_insert(p), p, "stream {key} is on two partitions");
            if !first.insert(r.event_id()) {
                continue; // a redelivery: consumers drop it by its event id
            }
            let seq = r.value["seq"].as_i64().expect("seq");
            let next = next_seq.entry(key.clone()).or_insert(1);
            assert_eq!(seq, *next, "stream {key}: version {seq} where {next} was due (event {})", r.event_id());
            *next += 1;
            assert_eq!(r.value["stream"], key.as_str());
            assert_eq!(r.headers["highwater-stream-id"], key);
            assert_eq!(r.headers["highwater-stream-type"], STREAM_TYPE);
            assert_eq!(r.headers["highwater-event-type"], EVENT_TYPE);
            assert_eq!(r.headers["highwater-stream-version"], seq.to_string());
            assert_eq!(r.headers["highwater-consumer"], "relay");
            assert!(r.headers["highwater-correlation-id"].starts_with("corr-"), "{:?}", r.headers);
            check_trace(&r.headers);
            assert!(r.headers.contains_key("highwater-created-at"), "{:?}", r.headers);
            assert_eq!(r.headers["x-team"], "billing", "the definition's extra header");
        }
    }
}

fn relay_spec(brokers: &str, topic: &str, extra: &str) -> String {
    format!(
        "delivery: Shared\nbatchSize: 50\nmaxAttempts: 1000\nbackoff: {{initial: 100ms, max: 1s}}\n\
         sink:\n  kafka:\n    brokers: [\"{brokers}\"]\n    topic: \"{topic}\"\n    timeout: 3s\n    \
         headers: {{x-team: billing}}\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_reaches_kafka_in_stream_order_across_a_broker_kill() {
    let mut kafka = Kafka::start(KafkaOptions::default()).await.expect("start kafka");
    let bootstrap = kafka.bootstrap();
    create_topics(&bootstrap, &["events.order"]).await;
    let db = db().await;
    apply(&db, "relay", &relay_spec(&bootstrap, "events.{streamType}", "    compression: lz4\n")).await;
    let logs = tempfile::tempdir().unwrap();
    let _dispatcher = dispatcher(&db.url, logs.path(), &[]);

    let mut writer = Writer::new(&db.pool, 20);
    let mut ids = writer.append(300, Duration::ZERO).await;
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(60)).await;

    // Kill the broker while events keep coming: the batch in flight is not acknowledged, the
    // shard records why and retries with backoff until the broker is back.
    let writing = tokio::spawn(async move { writer.append(300, Duration::from_millis(3)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    kafka.kill();
    let during = wait_error(&db.pool, "relay", "not acknowledged", Duration::from_secs(30)).await;
    assert_ne!(during.status, "dead", "retrying, not dead: {during:?}");
    assert!(during.attempts >= 1, "{during:?}");
    eprintln!("last_error while the broker was down: {:?}", during.last_error);
    let killed_at = std::time::Instant::now();
    kafka.restart().await.expect("restart kafka");
    let restarted = killed_at.elapsed();
    ids.extend(writing.await.unwrap());
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(90)).await;
    eprintln!(
        "broker back {:.1}s after the error was recorded; caught up {:.1}s after that",
        restarted.as_secs_f64(),
        (killed_at.elapsed() - restarted).as_secs_f64()
    );
    let after = shard(&db.pool, "relay").await;
    assert_eq!((after.status.as_str(), after.attempts), ("idle", 0), "{after:?}");

    let records = read_topic(&bootstrap, "events.order", ids.len()).await;
    eprintln!("{} records for {} events after one broker kill", records.len(), ids.len());
    // One interruption: at most one batch (50) written twice.
    audit(&records, &ids, 50);
}

/// A missing topic and bad SCRAM credentials each name their cause in `last_error` and end
/// `dead` after `maxAttempts`; the right credentials deliver; a network cut (through the proxy
/// the broker advertises) is named, retried, and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_faults_are_named_retried_and_dead_after_max_attempts() {
    let port = Kafka::reserve_port().unwrap();
    let proxy = Proxy::start(format!("127.0.0.1:{port}").parse().unwrap()).await.unwrap();
    let opts = KafkaOptions {
        port: Some(port),
        advertised_port: Some(proxy.port()),
        scram_user: Some(("relay".into(), "relay-secret".into())),
        ..Default::default()
    };
    let kafka = Kafka::start(opts).await.expect("start kafka");
    let direct = format!("127.0.0.1:{port}");
    let sasl = kafka.sasl_bootstrap().unwrap();
    create_topics(&direct, &["relay-cut", "relay-scram", "relay-scram512", "relay-badauth", "relay-plain"]).await;
    let db = db().await;
    let quick = "delivery: Shared\nbatchSize: 50\nmaxAttempts: 3\nbackoff: {initial: 100ms, max: 200ms}\n";
    apply(
        &db,
        "missing",
        &format!("{quick}sink:\n  kafka: {{brokers: [\"{direct}\"], topic: no-such-topic, timeout: 2s}}\n"),
    )
    .await;
    let sasl_sink_with = |mechanism: &str, topic: &str, env: &str| {
        format!(
            "sink:\n  kafka:\n    brokers: [\"{sasl}\"]\n    topic: {topic}\n    timeout: 2s\n    \
             sasl: {{mechanism: {mechanism}, username: relay, password: {{env: {env}}}}}\n"
        )
    };
    let sasl_sink = |topic: &str, env: &str| sasl_sink_with("SCRAM-SHA-256", topic, env);
    apply(&db, "badauth", &format!("{quick}{}", sasl_sink("relay-badauth", "KAFKA_WRONG_PASSWORD"))).await;
    apply(
        &db,
        "plain",
        &format!(
            "delivery: Shared\nbatchSize: 50\nbackoff: {{initial: 100ms, max: 1s}}\n{}",
            sasl_sink_with("PLAIN", "relay-plain", "KAFKA_PASSWORD")
        ),
    )
    .await;
    apply(
        &db,
        "scram512",
        &format!(
            "delivery: Shared\nbatchSize: 50\nbackoff: {{initial: 100ms, max: 1s}}\n{}",
            sasl_sink_with("SCRAM-SHA-512", "relay-scram512", "KAFKA_PASSWORD")
        ),
    )
    .await;
    apply(
        &db,
        "scram",
        &format!(
            "delivery: Shared\nbatchSize: 50\nbackoff: {{initial: 100ms, max: 1s}}\n{}",
            sasl_sink("relay-scram", "KAFKA_PASSWORD")
        ),
    )
    .await;
    apply(&db, "relay", &relay_spec(&proxy_bootstrap(&proxy), "relay-cut", "")).await;
    let logs = tempfile::tempdir().unwrap();
    let relay_process = dispatcher(
        &db.url,
        logs.path(),
        &[("KAFKA_PASSWORD", "relay-secret\n"), ("KAFKA_WRONG_PASSWORD", "not-the-secret")],
    );
    let mut writer = Writer::new(&db.pool, 10);
    let mut ids = writer.append(100, Duration::ZERO).await;

    let missing = wait_dead(&db.pool, "missing", Duration::from_secs(60)).await;
    eprintln!("missing topic: {missing:?}");
    let e = missing.last_error.unwrap();
    assert!(e.contains("no-such-topic") && e.contains("create the topic"), "{e}");
    assert_eq!(missing.attempts, 3);

    let bad = wait_dead(&db.pool, "badauth", Duration::from_secs(60)).await;
    eprintln!("bad credentials: {bad:?}");
    let e = bad.last_error.unwrap();
    assert!(e.contains("SASL authentication error") && e.contains("check sink.kafka.sasl.username"), "{e}");
    assert!(!e.contains("not-the-secret"), "the password is never shown: {e}");

    wait_caught_up(&db.pool, "scram", ids[ids.len() - 1], Duration::from_secs(60)).await;
    wait_caught_up(&db.pool, "scram512", ids[ids.len() - 1], Duration::from_secs(60)).await;
    wait_caught_up(&db.pool, "plain", ids[ids.len() - 1], Duration::from_secs(60)).await;
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(60)).await;

    // Cut the network between the sink and the broker while events keep coming.
    proxy.set_mode(Mode::Cut);
    ids.extend(writer.append(100, Duration::from_millis(5)).await);
    let during = wait_error(&db.pool, "relay", "not acknowledged", Duration::from_secs(30)).await;
    eprintln!("network cut: {during:?}");
    assert_ne!(during.status, "dead");
    proxy.set_mode(Mode::Pass);
    let healed = std::time::Instant::now();
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(90)).await;
    eprintln!("caught up {:.1}s after the network came back", healed.elapsed().as_secs_f64());

    // The per-sink metrics saw it: errors of the failing sinks, batch acknowledgements of the
    // working ones.
    let errors =
        relay_process.metric("highwater_sink_errors_total", &[("consumer", "missing"), ("sink", "kafka")]).await;
    assert_eq!(errors, Some(3.0), "one per failed attempt");
    let errors = relay_process.metric("highwater_sink_errors_total", &[("consumer", "relay"), ("sink", "kafka")]).await;
    assert!(errors.is_some_and(|n| n >= 1.0), "the cut failed at least one attempt: {errors:?}");
    let acked =
        relay_process.metric("highwater_sink_publish_seconds_count", &[("consumer", "scram"), ("sink", "kafka")]).await;
    assert!(acked.is_some_and(|n| n >= 2.0), "100 events in batches of 50: {acked:?}");

    let records = read_topic(&direct, "relay-cut", ids.len()).await;
    eprintln!("{} records for {} events after one network cut", records.len(), ids.len());
    audit(&records, &ids, 50);
    drop(kafka);
}

/// TLS to the broker (`tls.caFile`): the sink trusts the test CA and delivers every event over
/// the broker's SSL listener; a sink that trusts only the system's CAs is refused, named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_broker_with_a_ca_file() {
    let certs = tempfile::tempdir().unwrap();
    let pki = highwater_e2e::pki::Pki::generate(certs.path(), &["127.0.0.1", "localhost"]).unwrap();
    let opts = KafkaOptions { tls: Some((pki.serving_cert(), pki.serving_key())), ..Default::default() };
    let kafka = Kafka::start(opts).await.expect("start kafka");
    let tls = kafka.ssl_bootstrap().unwrap();
    create_topics(&kafka.bootstrap(), &["relay-tls", "relay-untrusted"]).await;
    let db = db().await;
    let ca = pki.ca_cert();
    apply(&db, "relay", &relay_spec(&tls, "relay-tls", &format!("    tls: {{caFile: \"{}\"}}\n", ca.display()))).await;
    apply(
        &db,
        "untrusted",
        "delivery: Shared\nmaxAttempts: 2\nbackoff: {initial: 100ms, max: 200ms}\nsink:\n  kafka:\n    \
         brokers: [\"TLS\"]\n    topic: relay-untrusted\n    timeout: 2s\n    tls: {}\n"
            .replace("TLS", &tls)
            .as_str(),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let _dispatcher = dispatcher(&db.url, logs.path(), &[]);
    let ids = Writer::new(&db.pool, 10).append(100, Duration::ZERO).await;
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(60)).await;
    let records = read_topic(&kafka.bootstrap(), "relay-tls", ids.len()).await;
    audit(&records, &ids, 0);
    let untrusted = wait_dead(&db.pool, "untrusted", Duration::from_secs(60)).await;
    eprintln!("untrusted CA: {untrusted:?}");
    let e = untrusted.last_error.unwrap();
    assert!(e.contains("SSL handshake failed") || e.contains("certificate verify failed"), "{e}");
}

/// Mutual TLS: the broker requires a client certificate from its CA (`ssl.client.auth=required`).
/// The sink with `certFile` and `keyFile` delivers every event; the same sink without them is
/// refused in the handshake, named in `last_error`, and `dead` after `maxAttempts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_client_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let pki = highwater_e2e::pki::Pki::generate(certs.path(), &["127.0.0.1", "localhost"]).unwrap();
    let client = pki.client_cert("relay", "relay", &[]).unwrap();
    let opts = KafkaOptions {
        tls: Some((pki.serving_cert(), pki.serving_key())),
        client_ca: Some(pki.ca_cert()),
        ..Default::default()
    };
    let kafka = Kafka::start(opts).await.expect("start kafka");
    let tls = kafka.ssl_bootstrap().unwrap();
    create_topics(&kafka.bootstrap(), &["relay-mtls", "relay-nocert"]).await;
    let db = db().await;
    let ca = pki.ca_cert();
    let mtls = format!(
        "    tls: {{caFile: \"{}\", certFile: \"{}\", keyFile: \"{}\"}}\n",
        ca.display(),
        client.cert.display(),
        client.key.display()
    );
    apply(&db, "relay", &relay_spec(&tls, "relay-mtls", &mtls)).await;
    apply(
        &db,
        "nocert",
        &format!(
            "delivery: Shared\nmaxAttempts: 2\nbackoff: {{initial: 100ms, max: 200ms}}\nsink:\n  kafka:\n    \
             brokers: [\"{tls}\"]\n    topic: relay-nocert\n    timeout: 2s\n    tls: {{caFile: \"{}\"}}\n",
            ca.display()
        ),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let _dispatcher = dispatcher(&db.url, logs.path(), &[]);
    let ids = Writer::new(&db.pool, 10).append(100, Duration::ZERO).await;
    wait_caught_up(&db.pool, "relay", ids[ids.len() - 1], Duration::from_secs(60)).await;
    let records = read_topic(&kafka.bootstrap(), "relay-mtls", ids.len()).await;
    audit(&records, &ids, 0);
    let refused = wait_dead(&db.pool, "nocert", Duration::from_secs(60)).await;
    eprintln!("no client certificate: {refused:?}");
    let e = refused.last_error.unwrap();
    assert!(e.contains("relay-nocert") && (e.contains("SSL") || e.contains("ssl")), "{e}");
}

/// A figure, not a check (ignored in the suite): how fast a backlog drains to Kafka. Run with a
/// release build: `cargo build --release -p highwater --bin highwater && HIGHWATER_BIN=target/release/highwater
/// RELAY_EVENTS=200000 cargo test -p highwater-e2e --test kafka_sink relay_throughput -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn relay_throughput() {
    let n: i64 = std::env::var("RELAY_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let batch: u32 = std::env::var("RELAY_BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(5000);
    let kafka = Kafka::start(KafkaOptions::default()).await.expect("start kafka");
    create_topics(&kafka.bootstrap(), &["events.order"]).await;
    let db = db().await;
    let mut from = 1;
    while from <= n {
        let to = (from + 9_999).min(n);
        sqlx::query(
            "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload, metadata)
             SELECT 'order', 'o-' || (g % 1000), 'OrderPlaced',
                    jsonb_build_object('order_id', g, 'amount', 42, 'currency', 'EUR'),
                    jsonb_build_object('correlation_id', gen_random_uuid()::text)
               FROM generate_series($1::bigint, $2::bigint) g",
        )
        .bind(from)
        .bind(to)
        .execute(&db.pool)
        .await
        .unwrap();
        from = to + 1;
    }
    let last: i64 = sqlx::query_scalar("SELECT max(id) FROM highwater.events").fetch_one(&db.pool).await.unwrap();
    apply(
        &db,
        "relay",
        &format!(
            "delivery: Shared\nbatchSize: {batch}\nsink:\n  kafka: {{brokers: [\"{}\"], topic: \"events.{{streamType}}\"}}\n",
            kafka.bootstrap()
        ),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let relay = dispatcher(&db.url, logs.path(), &[]);
    wait_caught_up(&db.pool, "relay", last, Duration::from_secs(600)).await;
    let took = started.elapsed().as_secs_f64();
    let p = relay.metric("highwater_sink_publish_seconds_sum", &[("consumer", "relay")]).await.unwrap_or(0.0);
    let c = relay.metric("highwater_sink_publish_seconds_count", &[("consumer", "relay")]).await.unwrap_or(0.0);
    eprintln!(
        "{n} events to Kafka in {took:.1} s (dispatcher start included): {:.0} events/s; batch {batch}, mean \
         publish {:.0} ms per batch",
        n as f64 / took,
        1000.0 * p / c.max(1.0)
    );
}

fn proxy_bootstrap(proxy: &Proxy) -> String {
    format!("127.0.0.1:{}", proxy.port())
}
