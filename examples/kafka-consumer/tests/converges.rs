//! The example consumer converges to the right read model despite redelivery: events relayed by
//! a real `highwater dispatch` (SIGKILLed once mid-relay) to a real Kafka broker are consumed
//! into `order_totals`; then the whole topic is delivered again (a new consumer group reads from
//! the start, as after lost offsets) and not one event is applied twice.
//!
//! Needs `highwater` built in the target directory, Java 17 and Maven (as the e2e broker tests).
use std::{process::Command, time::Duration};

use highwater::{NewEvent, db, definitions, embedded::EmbeddedPostgres, event_types};
use highwater_e2e::{
    brokers::kafka::{Kafka, KafkaOptions},
    chaos::fleet::highwater_bin,
    process::Process,
};
use highwater_example_kafka_consumer::{Counts, migrate, run};
use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{Consumer, StreamConsumer},
};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "events.order";
const ORDERS: usize = 20;
const PER_ORDER: usize = 15;

fn dispatcher(url: &str, logs: &std::path::Path, n: u32) -> Process {
    let port = highwater::embedded::free_port().unwrap();
    let mut cmd = Command::new(highwater_bin().unwrap());
    cmd.args(["dispatch", "--instance-id", "relay", "--poll-interval", "20ms"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", url)
        .env("HIGHWATER_LOG", "info,sqlx=warn");
    Process::spawn("highwater", cmd, &logs.join(format!("dispatcher-{n}.log"))).unwrap()
}

async fn cursor(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT cursor_id FROM highwater.consumer_shards WHERE consumer = 'relay'")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Consumes with group `group` until every event is in `processed_events` and the topic is
/// quiet, then stops.
async fn consume(bootstrap: &str, group: &str, pool: &PgPool, events: i64) -> Counts {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[TOPIC]).unwrap();
    let stop = CancellationToken::new();
    let run = {
        let pool = pool.clone();
        let stop = stop.clone();
        tokio::spawn(async move { run(&consumer, &pool, stop).await })
    };
    highwater_e2e::eventually("every event processed", Duration::from_secs(60), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM processed_events").fetch_one(pool).await.unwrap() == events
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await; // redeliveries still on their way
    stop.cancel();
    run.await.unwrap().unwrap()
}

/// (order, events, total) from the read model, and what the events table says it must be.
async fn state(pool: &PgPool) -> (Vec<(String, i64, i64)>, Vec<(String, i64, i64)>) {
    let got = sqlx::query_as("SELECT order_id, events, total FROM order_totals ORDER BY order_id")
        .fetch_all(pool)
        .await
        .unwrap();
    let want = sqlx::query_as(
        "SELECT stream_id, count(*), sum((payload->>'amount')::bigint)::bigint FROM highwater.events
          GROUP BY stream_id ORDER BY stream_id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    (got, want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_model_converges_despite_redelivery() {
    let kafka = Kafka::start(KafkaOptions::default()).await.unwrap();
    let bootstrap = kafka.bootstrap();
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).create().unwrap();
    for r in
        admin.create_topics(&[NewTopic::new(TOPIC, 3, TopicReplication::Fixed(1))], &AdminOptions::new()).await.unwrap()
    {
        r.unwrap();
    }
    let pg = EmbeddedPostgres::start(Default::default()).await.unwrap();
    let pool = db::connect(&pg.url(), 10).await.unwrap();
    db::migrate(&pool).await.unwrap();
    event_types::register(&pool, "OrderPaid", None, None).await.unwrap();
    migrate(&pool).await.unwrap();
    let yaml = format!(
        "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: relay}}\nspec:\n  delivery: Shared\n  \
         batchSize: 20\n  sink:\n    kafka: {{brokers: [\"{bootstrap}\"], topic: \"events.{{streamType}}\"}}\n"
    );
    definitions::apply(&pool, &definitions::parse(&yaml, "test").unwrap()).await.unwrap();

    let logs = tempfile::tempdir().unwrap();
    let mut relay = dispatcher(&pg.url(), logs.path(), 0);
    let mut last = 0;
    for i in 0..ORDERS * PER_ORDER {
        let mut conn = pool.acquire().await.unwrap();
        last = highwater::append(
            &mut conn,
            &NewEvent {
                stream_type: "order".into(),
                stream_id: format!("o-{}", i % ORDERS),
                event_type: "OrderPaid".into(),
                payload: json!({"amount": (i * 7 % 13 + 1) as i64}),
                metadata: None,
                tenant_id: None,
                expected_version: None,
            },
        )
        .await
        .unwrap();
        // The relay SIGKILLed once mid-stream: the batch it had out may be published again.
        if i == ORDERS * PER_ORDER / 2 {
            relay.kill();
            relay = dispatcher(&pg.url(), logs.path(), 1);
        }
    }
    highwater_e2e::eventually("the relay caught up", Duration::from_secs(60), || async { cursor(&pool).await >= last })
        .await;
    let events = (ORDERS * PER_ORDER) as i64;

    let first = consume(&bootstrap, "order-totals", &pool, events).await;
    eprintln!("first run: {first:?}");
    assert_eq!(first.applied, events as u64, "each event applied once");
    let (got, want) = state(&pool).await;
    assert_eq!(got, want, "the read model matches the events");

    // Offsets lost: a new group reads the whole topic again. Nothing is applied twice.
    let again = consume(&bootstrap, "order-totals-replay", &pool, events).await;
    eprintln!("replay: {again:?}");
    assert!(again.read >= events as u64, "the whole topic was delivered again: {again:?}");
    assert_eq!(again.applied, 0, "a redelivered event is never applied again");
    let (got_again, _) = state(&pool).await;
    assert_eq!(got_again, want, "the read model is unchanged by the redelivery");
}
