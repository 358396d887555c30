//! Kubernetes Events on transitions: shard dead, restarted, skipped, pod shards removed.
use highwater_crds::EventConsumer;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Resource,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

use crate::context::Context;

fn recorder(ctx: &Context) -> Recorder {
    Recorder::new(
        ctx.client.clone(),
        Reporter { controller: "highwater-operator".into(), instance: Some(ctx.config.identity.clone()) },
    )
}

/// Publishes an event; a failure to publish is logged, never fatal.
pub async fn publish(ctx: &Context, reference: &ObjectReference, warning: bool, reason: &str, note: String) {
    let ev = Event {
        type_: if warning { EventType::Warning } else { EventType::Normal },
        reason: reason.to_owned(),
        note: Some(note.chars().take(1000).collect()),
        action: reason.to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder(ctx).publish(&ev, reference).await {
        tracing::warn!(error = %e, reason, "publishing a Kubernetes event failed");
    }
}

pub async fn on(ctx: &Context, ec: &EventConsumer, warning: bool, reason: &str, note: String) {
    publish(ctx, &ec.object_ref(&()), warning, reason, note).await;
}

/// The resource that declares `consumer` in `namespace`, for pod-shard removals.
pub async fn pod_shards_removed(ctx: &Context, namespace: &str, consumer: &str, pod: &str) {
    let api: kube::Api<EventConsumer> = kube::Api::namespaced(ctx.client.clone(), namespace);
    let found = api
        .list(&Default::default())
        .await
        .ok()
        .and_then(|l| l.items.into_iter().find(|ec| crate::controller::consumer_name(ec) == consumer));
    if let Some(ec) = found {
        on(ctx, &ec, false, "PodShardsRemoved", format!("pod {pod} is gone: its shard was deleted")).await;
    }
}
