//! Kubernetes Events on transitions: shard dead, restarted, skipped, pod shards removed. One
//! [`Recorder`] (in the [`Context`]) publishes them all, so repeated events are aggregated.
use highwater_crds::{EventConsumer, Problem};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Resource,
    runtime::events::{Event, EventType},
};

use crate::context::Context;

/// Why an event is published; it decides the event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    ShardDead,
    /// A webhook receiver answered `410 Gone`: the dispatcher disabled the consumer.
    ReceiverGone,
    Restarted,
    RestartRefused,
    SkipInvalid,
    Skipped,
    SkipMismatch,
    PodShardsRemoved,
    Rebuilt,
    RebuildRefused,
    Redriven,
    RedriveRefused,
    Discarded,
    DiscardRefused,
    Replayed,
    ReplayRefused,
    /// The spec could not be applied.
    Refused(Problem),
    /// An `EventType`'s version was refused by the registry (which is unchanged).
    VersionRefused,
    /// Another `EventType` declares the same event type.
    TypeConflict,
    /// New versions of an `EventType` were registered.
    VersionsRegistered,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ShardDead => "ShardDead",
            Reason::ReceiverGone => "ReceiverGone",
            Reason::Restarted => "Restarted",
            Reason::RestartRefused => "RestartRefused",
            Reason::SkipInvalid => "SkipInvalid",
            Reason::Skipped => "Skipped",
            Reason::SkipMismatch => "SkipMismatch",
            Reason::PodShardsRemoved => "PodShardsRemoved",
            Reason::Rebuilt => "Rebuilt",
            Reason::RebuildRefused => "RebuildRefused",
            Reason::Redriven => "Redriven",
            Reason::RedriveRefused => "RedriveRefused",
            Reason::Discarded => "Discarded",
            Reason::DiscardRefused => "DiscardRefused",
            Reason::Replayed => "Replayed",
            Reason::ReplayRefused => "ReplayRefused",
            Reason::Refused(p) => p.as_str(),
            Reason::VersionRefused => "VersionRefused",
            Reason::TypeConflict => "Conflict",
            Reason::VersionsRegistered => "VersionsRegistered",
        }
    }

    pub fn event_type(self) -> EventType {
        match self {
            Reason::Restarted
            | Reason::Skipped
            | Reason::PodShardsRemoved
            | Reason::Rebuilt
            | Reason::Redriven
            | Reason::Discarded
            | Reason::Replayed
            | Reason::VersionsRegistered => EventType::Normal,
            _ => EventType::Warning,
        }
    }
}

/// Publishes an event on `ec`; a failure to publish is logged, never fatal.
pub async fn on(ctx: &Context, ec: &EventConsumer, reason: Reason, note: String) {
    publish(ctx, ec, reason, note, None).await;
}

/// The Event of an operation an annotation requested (`highwater_ops`): `done`'s reason and
/// note; a refusal (nothing changed: unknown consumer, not applicable, invalid) a Warning with
/// `refused` and its message; any other error goes back to the reconciler, which retries.
pub async fn of_operation<T>(
    ctx: &Context,
    ec: &EventConsumer,
    result: highwater_ops::Result<T>,
    refused: Reason,
    done: impl FnOnce(T) -> (Reason, String),
) -> crate::Result<()> {
    match result {
        Ok(outcome) => {
            let (reason, note) = done(outcome);
            on(ctx, ec, reason, note).await;
        }
        Err(e) if e.is_refusal() => on(ctx, ec, refused, e.to_string()).await,
        Err(e) => return Err(crate::Error::Store(e.into())),
    }
    Ok(())
}

/// Publishes an event on any resource of the operator (an `EventType`).
pub async fn on_object<K: Resource<DynamicType = ()>>(ctx: &Context, object: &K, reason: Reason, note: String) {
    publish_on(ctx, &object.object_ref(&()), reason, note, None).await;
}

/// The recorder aggregates events with the same reason on the same objects: `related` (a pod)
/// keeps the events about different objects apart.
async fn publish(ctx: &Context, ec: &EventConsumer, reason: Reason, note: String, related: Option<ObjectReference>) {
    publish_on(ctx, &ec.object_ref(&()), reason, note, related).await;
}

async fn publish_on(
    ctx: &Context,
    object: &ObjectReference,
    reason: Reason,
    note: String,
    related: Option<ObjectReference>,
) {
    let ev = Event {
        type_: reason.event_type(),
        reason: reason.as_str().to_owned(),
        note: Some(note.chars().take(1000).collect()),
        action: reason.as_str().to_owned(),
        secondary: related,
    };
    if let Err(e) = ctx.recorder.publish(&ev, object).await {
        tracing::warn!(error = %e, reason = reason.as_str(), "publishing a Kubernetes event failed");
    }
}

/// On the resource that declares `consumer` in `namespace`, about the pod `pod` (uid `uid`)
/// whose shards were removed.
pub async fn pod_shards_removed(ctx: &Context, namespace: &str, consumer: &str, pod: &str, uid: &str) {
    let api: kube::Api<EventConsumer> = kube::Api::namespaced(ctx.client.clone(), namespace);
    let found = api
        .list(&Default::default())
        .await
        .ok()
        .and_then(|l| l.items.into_iter().find(|ec| ec.consumer_name() == consumer));
    if let Some(ec) = found {
        let related = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.to_owned()),
            namespace: Some(namespace.to_owned()),
            uid: Some(uid.to_owned()),
            ..Default::default()
        };
        let note = format!("pod {pod} is gone: its shard was deleted");
        publish(ctx, &ec, Reason::PodShardsRemoved, note, Some(related)).await;
    }
}
