//! The chaos run's Kafka consumer: `chaos-kafka`, a shared kafka sink to a real broker
//! ([`crate::brokers::kafka`]) that the dispatchers reach directly (the network faults are
//! between them and PostgreSQL), and its auditor, which reads the whole topic back with a real
//! Kafka consumer and compares the `highwater-event-id` headers with what was committed: at least
//! once, so no loss and at most one batch of redeliveries per interruption.
use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context, Result, bail};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    message::Headers,
};

use super::audit::Delivery;
use crate::brokers::kafka::{Kafka, KafkaOptions};

pub const CONSUMER: &str = "chaos-kafka";
const TOPIC: &str = "chaos";
const PARTITIONS: i32 = 3;

/// The broker and the topic the consumer publishes to.
pub struct ChaosKafka {
    pub kafka: Kafka,
}

impl ChaosKafka {
    pub async fn start() -> Result<Self> {
        let kafka = Kafka::start(KafkaOptions::default()).await.context("starting Kafka for chaos-kafka")?;
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", kafka.bootstrap()).create()?;
        let topic = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1));
        for r in admin.create_topics([&topic], &AdminOptions::new()).await? {
            r.map_err(|(t, e)| anyhow::anyhow!("creating topic {t}: {e}"))?;
        }
        Ok(ChaosKafka { kafka })
    }

    /// The EventConsumer document of `chaos-kafka`.
    pub fn consumer_yaml(&self, batch: u32) -> String {
        format!(
            "---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {CONSUMER}}}\n\
             spec: {{delivery: Shared, batchSize: {batch}, sink: {{kafka: {{brokers: ['{}'], topic: {TOPIC}, \
             timeout: 5s}}}}}}\n",
            self.kafka.bootstrap()
        )
    }

    /// Every record of the topic, from the beginning to the end it has now, against `committed`.
    pub async fn audit(&self, committed: &BTreeSet<i64>) -> Result<Delivery> {
        let bootstrap = self.kafka.bootstrap();
        let ids = tokio::task::spawn_blocking(move || read_ids(&bootstrap)).await??;
        Ok(Delivery::compare(CONSUMER, committed, &ids))
    }
}

/// The event ids of every record in the topic (a record without one is an error: the sink
/// always sets it).
fn read_ids(bootstrap: &str) -> Result<Vec<i64>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "chaos-audit")
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)?;
        ends.push(c.fetch_watermarks(TOPIC, p, Duration::from_secs(10))?.1);
    }
    c.assign(&tpl)?;
    let mut next = vec![0_i64; PARTITIONS as usize];
    let mut ids = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while next.iter().zip(&ends).any(|(n, e)| n < e) {
        if std::time::Instant::now() > deadline {
            bail!("reading topic {TOPIC} back: at offsets {next:?} of {ends:?} after 60 s");
        }
        let Some(m) = c.poll(Duration::from_millis(500)) else { continue };
        let m = m?;
        next[m.partition() as usize] = m.offset() + 1;
        let id = m
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == "highwater-event-id"))
            .and_then(|h| h.value)
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .with_context(|| format!("a record without highwater-event-id at {}/{}", m.partition(), m.offset()))?;
        ids.push(id);
    }
    Ok(ids)
}
