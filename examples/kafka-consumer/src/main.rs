//! `order-totals`: the example idempotent consumer as a program. Environment: `KAFKA_BROKERS`,
//! `KAFKA_TOPIC` (default `events.order`), `KAFKA_GROUP` (default `order-totals`), `DATABASE_URL`.
use anyhow::{Context, Result};
use highwater_example_kafka_consumer::{migrate, run};
use rdkafka::{
    ClientConfig,
    consumer::{Consumer, StreamConsumer},
};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let env = |k: &str, default: Option<&str>| -> Result<String> {
        std::env::var(k).or_else(|_| default.map(str::to_owned).with_context(|| format!("set {k}")))
    };
    let pool = sqlx::PgPool::connect(&env("DATABASE_URL", None)?).await?;
    migrate(&pool).await?;
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS", None)?)
        .set("group.id", env("KAFKA_GROUP", Some("order-totals"))?)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[&env("KAFKA_TOPIC", Some("events.order"))?])?;
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });
    let counts = run(&consumer, &pool, stop).await?;
    tracing::info!(read = counts.read, applied = counts.applied, "stopped");
    Ok(())
}
