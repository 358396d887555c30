//! The relay scenario's topics on the benchmark's Kafka broker, read with a real Kafka consumer
//! (librdkafka): created with the broker's append time on every record, counted by their high
//! watermarks while a relay drains, and read back for commit-to-Kafka.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    message::Timestamp,
};

pub const PARTITIONS: i32 = 3;

pub async fn create_topics(bootstrap: &str, topics: &[&str]) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", bootstrap).create()?;
    // The broker stamps each record as it appends it: the "in Kafka" time of commit-to-Kafka.
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| {
            NewTopic::new(t, PARTITIONS, TopicReplication::Fixed(1)).set("message.timestamp.type", "LogAppendTime")
        })
        .collect();
    for r in admin.create_topics(&new, &AdminOptions::new()).await? {
        r.map_err(|(t, e)| anyhow::anyhow!("creating topic {t}: {e}"))?;
    }
    Ok(())
}

/// A consumer of `topic` from its beginning, on every partition.
fn consumer(bootstrap: &str, topic: &str) -> Result<BaseConsumer> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("bench-{topic}"))
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    Ok(c)
}

/// Records in `topic` (the sum of its partitions' high watermarks).
fn count(c: &BaseConsumer, topic: &str) -> Result<i64> {
    let mut n = 0;
    for p in 0..PARTITIONS {
        n += c.fetch_watermarks(topic, p, Duration::from_secs(5))?.1;
    }
    Ok(n)
}

/// Waits until `topic` holds `n` records; returns when the first one appeared, from `since`.
/// `alive` fails when the relay has died.
pub async fn wait_records(
    bootstrap: &str,
    topic: &str,
    n: i64,
    timeout: Duration,
    since: Instant,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<Duration> {
    let c = Arc::new(consumer(bootstrap, topic)?);
    let topic_name = topic.to_owned();
    let mut first = None;
    loop {
        let (c2, t) = (c.clone(), topic_name.clone());
        let have = tokio::task::spawn_blocking(move || count(&c2, &t)).await??;
        if have > 0 && first.is_none() {
            first = Some(since.elapsed());
        }
        if have >= n {
            return Ok(first.unwrap_or_default());
        }
        alive().with_context(|| format!("{have} of {n} records in {topic}"))?;
        if since.elapsed() > timeout {
            bail!("{have} of {n} records in {topic} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads `n` records of `topic` back: append time minus the commit time in the payload, in ms,
/// for each record that has one.
pub async fn commit_to_kafka_ms(bootstrap: &str, topic: &str, n: usize) -> Result<Vec<f64>> {
    let c = consumer(bootstrap, topic)?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(120);
        while seen < n {
            if Instant::now() > deadline {
                bail!("read {seen} of {n} records of {topic} back");
            }
            let Some(m) = c.poll(Duration::from_millis(500)) else { continue };
            let m = m?;
            seen += 1;
            let Timestamp::LogAppendTime(appended) = m.timestamp() else {
                bail!("{topic}: a record without a log append time ({:?})", m.timestamp());
            };
            let payload: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or(b"null"))
                .with_context(|| format!("{topic}: a record whose value is not JSON"))?;
            if let Some(us) = payload.get("committed_at_us").and_then(serde_json::Value::as_i64) {
                out.push(appended as f64 - us as f64 / 1000.0);
            }
        }
        Ok(out)
    })
    .await?
}
