//! A sink wrapped with its per-sink metrics: failed deliveries and the time to acknowledgement of
//! every delivered batch, labelled by consumer and sink kind (bounded labels only).
use std::{sync::Arc, time::Instant};

use async_trait::async_trait;

use super::{DeliveryContext, Sink, SinkError};
use crate::{
    Event,
    metrics::{Metrics, SinkLabels},
};

pub struct Measured {
    inner: Arc<dyn Sink>,
    metrics: Arc<Metrics>,
    labels: SinkLabels,
}

/// `inner`, counting into `metrics` under `consumer`.
pub fn measured(inner: Arc<dyn Sink>, metrics: Arc<Metrics>, consumer: &str) -> Arc<dyn Sink> {
    let labels = SinkLabels { consumer: consumer.to_owned(), sink: inner.kind().to_owned() };
    Arc::new(Measured { inner, metrics, labels })
}

#[async_trait]
impl Sink for Measured {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn transactional(&self) -> bool {
        self.inner.transactional()
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let started = Instant::now();
        let res = self.inner.deliver(ctx, events).await;
        match &res {
            Ok(()) => self.metrics.sink_publish.get_or_create(&self.labels).observe(started.elapsed().as_secs_f64()),
            Err(_) => {
                self.metrics.sink_errors.get_or_create(&self.labels).inc();
            }
        }
        res
    }
}
