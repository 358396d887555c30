//! A sink wrapped with its per-sink metrics: failed deliveries and the time to acknowledgement of
//! every delivered batch, labelled by consumer and sink kind (bounded labels only).
use std::{sync::Arc, time::Instant};

use async_trait::async_trait;
use sqlx::PgConnection;

use super::{Applied, DeliveryContext, Sink, SinkError};
use crate::metrics::{Metrics, SinkLabels};
use highwater_store::{Event, shards::Advance};

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

    fn needs_bodies(&self) -> bool {
        self.inner.needs_bodies()
    }

    async fn prepare(&self, conn: &mut PgConnection) -> Result<(), SinkError> {
        self.inner.prepare(conn).await
    }

    fn begin(&self, consumer: &str, instance_id: &str) -> String {
        self.inner.begin(consumer, instance_id)
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let started = Instant::now();
        let res = self.inner.deliver(ctx, events).await;
        self.observe(started, res.is_ok());
        res
    }

    async fn deliver_and_advance(
        &self,
        conn: &mut PgConnection,
        who: (&str, &str),
        events: &[Event],
        advance: &Advance<'_>,
    ) -> highwater_store::Result<Applied> {
        let started = Instant::now();
        let res = self.inner.deliver_and_advance(conn, who, events, advance).await;
        self.observe(started, matches!(res, Ok(Applied::Moved(_) | Applied::Refused)));
        res
    }
}

impl Measured {
    fn observe(&self, started: Instant, ok: bool) {
        if ok {
            self.metrics.sink_publish.get_or_create(&self.labels).observe(started.elapsed().as_secs_f64());
        } else {
            self.metrics.sink_errors.get_or_create(&self.labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that differs from every default of the trait.
    struct Peculiar;

    #[async_trait]
    impl Sink for Peculiar {
        fn kind(&self) -> &'static str {
            "peculiar"
        }
        fn transactional(&self) -> bool {
            true
        }
        fn needs_bodies(&self) -> bool {
            false
        }
        fn begin(&self, consumer: &str, instance_id: &str) -> String {
            format!("BEGIN; -- {consumer} {instance_id}")
        }
        async fn deliver(&self, _ctx: &mut DeliveryContext<'_>, _events: &[Event]) -> Result<(), SinkError> {
            Ok(())
        }
    }

    /// The wrapper must pass every method through: a SQL sink whose `needs_bodies` and
    /// `prepare` were swallowed failed every batch once wrapped; one whose `begin` was swallowed
    /// would run without its statement_timeout. (`prepare` and `deliver_and_advance` need a
    /// connection; their forwarding is covered by every SQL sink test, which runs through this
    /// wrapper.)
    #[test]
    fn the_wrapper_forwards_every_method() {
        let m = measured(Arc::new(Peculiar), Arc::new(Metrics::default()), "c");
        assert_eq!((m.kind(), m.transactional(), m.needs_bodies()), ("peculiar", true, false));
        assert_eq!(m.begin("c", "i"), "BEGIN; -- c i");
    }
}
