//! The tracer provider: OTLP/HTTP exporter behind the SDK's batch processor (its own thread and
//! bounded queue, configured by `OTEL_BSP_*`), parent-based sampling unless `OTEL_TRACES_SAMPLER`
//! says otherwise (`config::sampler`), and the resource from `OTEL_SERVICE_NAME`/`OTEL_RESOURCE_ATTRIBUTES`.
use std::{sync::OnceLock, time::Duration};

use opentelemetry::KeyValue;
use opentelemetry_sdk::{
    Resource,
    error::OTelSdkResult,
    trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter},
};

use super::{config::Config, counts::COUNTS};
use highwater_store::{Error, Result};

/// The tracer [`super::process`] uses; unset while tracing is off.
pub(super) static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Tracing as started; [`Tracing::shutdown`] exports what is queued (bounded).
pub struct Tracing {
    provider: SdkTracerProvider,
}

/// Starts exporting when `cfg` says so (see [`super::config::from_env`]) as `service` unless
/// `OTEL_SERVICE_NAME` names it; `instance` and `group` go into the resource. Call once per
/// process.
pub fn init(cfg: Option<Config>, service: &str, instance: &str, group: &str) -> Result<Option<Tracing>> {
    let Some(cfg) = cfg else { return Ok(None) };
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().build().map_err(|e| {
        Error::config(format!("OTEL_EXPORTER_OTLP_ENDPOINT: cannot build the OTLP exporter: {e}"))
            .with_fix("set it to the backend's OTLP/HTTP address, e.g. http://otel-collector:4318")
    })?;
    let mut resource = Resource::builder().with_attributes([
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("service.instance.id", instance.to_owned()),
        KeyValue::new("highwater.group", group.to_owned()),
    ]);
    if !cfg.service_named {
        resource = resource.with_service_name(service.to_owned());
    }
    // The sampler and the ids are ours so that a span can be planned before its delivery
    // (`super::plan`): the same sampler decides there and here, the planned ids are the span's.
    let sampler = super::config::sampler(|k| std::env::var(k).ok());
    let _ = super::plan::SAMPLER.set(sampler.clone());
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_id_generator(super::plan::PlannedIds::default())
        .with_span_processor(BatchSpanProcessor::builder(Counted(exporter)).build())
        .with_resource(resource.build())
        .build();
    let tracer = opentelemetry::trace::TracerProvider::tracer_with_scope(
        &provider,
        opentelemetry::InstrumentationScope::builder("highwater").with_version(env!("CARGO_PKG_VERSION")).build(),
    );
    if TRACER.set(tracer).is_err() {
        return Err(Error::config("tracing is already started in this process"));
    }
    // The operations' run spans (`highwater_ops::span`) take the global tracer.
    opentelemetry::global::set_tracer_provider(provider.clone());
    tracing::info!("exporting traces over OTLP (OTEL_* environment variables)");
    Ok(Some(Tracing { provider }))
}

impl Tracing {
    /// Exports the queued spans and stops, within `within` (the processor's thread is joined off
    /// the async runtime).
    pub async fn shutdown(self, within: Duration) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(within));
        match tokio::time::timeout(within + Duration::from_secs(1), done).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "traces: shutdown did not export everything"),
            _ => tracing::warn!("traces: shutdown timed out; queued spans are dropped"),
        }
    }
}

/// The exporter, counting what the backend took and what it did not.
#[derive(Debug)]
struct Counted<E>(E);

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let res = self.0.export(batch).await;
        match &res {
            Ok(()) => {
                COUNTS.exported.inc_by(n);
            }
            Err(e) => {
                COUNTS.dropped.inc_by(n);
                tracing::debug!(error = %e, spans = n, "traces: a batch of spans was not exported");
            }
        }
        res
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource)
    }
}
