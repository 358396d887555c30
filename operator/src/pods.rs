//! Dispatcher pods and their shards: a shard for every live pod of a per-instance consumer's
//! group, registered as soon as the pod object exists; a pod's shards deleted once it is gone.
//! Level-based: every pass compares the database with the pod store, so pods deleted while the
//! operator was down are cleaned up too.
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::Utc;
use futures::StreamExt;
use highwater::kubernetes;
use highwater_crds::Delivery;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{Result, context::Context};

/// What the pod watch tells the shard pass: that something changed, and when pods were deleted.
#[derive(Default)]
pub struct PodChanges {
    notify: Notify,
    /// Deletion timestamps as the watch delivered them. The store alone would miss them when a
    /// pod is removed right after it gets one (a grace period of 0): the pass may only run after
    /// the pod has left the store.
    deleting: Mutex<HashMap<String, chrono::DateTime<Utc>>>,
}

impl PodChanges {
    fn record(&self, pod: &PartialObjectMeta<Pod>) {
        if let Some(t) = pod.metadata.deletion_timestamp.as_ref() {
            let at = chrono::DateTime::<Utc>::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond() as u32);
            self.deleting.lock().expect("pod changes lock").insert(pod.name_any(), at.unwrap_or_else(Utc::now));
        }
        self.notify.notify_one();
    }

    fn take_deletions(&self) -> HashMap<String, chrono::DateTime<Utc>> {
        std::mem::take(&mut *self.deleting.lock().expect("pod changes lock"))
    }
}

/// Starts the pod reflector; the store is ready after the first full list.
pub fn reflect(
    client: kube::Client,
    namespace: Option<&str>,
    group_label: &str,
    changed: Arc<PodChanges>,
    stop: CancellationToken,
) -> Store<PartialObjectMeta<Pod>> {
    // `Api<PartialObjectMeta<_>>` makes metadata-only requests: labels and uids are all we need.
    let api: Api<PartialObjectMeta<Pod>> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default().labels(group_label)))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                item = stream.next() => match item {
                    Some(Ok(pod)) => changed.record(&pod),
                    Some(Err(e)) => tracing::warn!(error = %e, "pod watch error"),
                    None => return,
                },
            }
        }
    });
    store
}

/// Live pods of a group in a namespace: name → uid.
fn live_pods(store: &Store<PartialObjectMeta<Pod>>, label: &str, ns: &str, group: &str) -> HashMap<String, String> {
    store
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .filter(|p| p.labels().get(label).map(String::as_str) == Some(group))
        .filter_map(|p| Some((p.name_any(), p.uid()?)))
        .collect()
}

/// One level-based pass: registers missing pod shards, deletes the shards of gone pods.
pub async fn sync(ctx: &Context, deletions: &HashMap<String, chrono::DateTime<Utc>>) -> Result<()> {
    let consumers = kubernetes::kubernetes_consumers(&ctx.pool, ctx.config.namespace.as_deref()).await?;
    let label = &ctx.config.group_label;
    let mut conn = ctx.pool.acquire().await.map_err(highwater::Error::from)?;
    for c in consumers.iter().filter(|c| c.delivery == Delivery::PerInstance) {
        let pods = live_pods(&ctx.pods, label, &c.namespace, &c.group);
        for (pod, uid) in &pods {
            if highwater::shards::register_for_pod(&mut conn, &c.name, pod, uid).await? {
                ctx.metrics.shards_created.inc();
                tracing::info!(consumer = %c.name, pod = %pod, "registered the pod's shard");
            }
        }
        // Only shards the operator manages (with a pod uid) whose pod is gone.
        let live: Vec<(String, String)> = pods.into_iter().collect();
        let removed = kubernetes::delete_pod_shards_except(&ctx.pool, &c.name, &live).await?;
        for (pod, uid) in removed {
            ctx.metrics.shards_removed.inc();
            if let Some(at) = deletions.get(&pod) {
                let secs = (Utc::now() - *at).num_milliseconds().max(0) as f64 / 1000.0;
                ctx.metrics.pod_shard_removal.observe(secs);
            }
            tracing::info!(consumer = %c.name, pod = %pod, "pod gone: removed its shard");
            crate::events::pod_shards_removed(ctx, &c.namespace, &c.name, &pod, &uid).await;
        }
    }
    Ok(())
}

/// Runs [`sync`] on every pod change and every `gc_interval`, once the pod store is ready.
pub async fn run(ctx: Arc<Context>, changed: Arc<PodChanges>, stop: CancellationToken) {
    if tokio::select! { _ = stop.cancelled() => true, r = ctx.pods.wait_until_ready() => r.is_err() } {
        return;
    }
    let mut tick = tokio::time::interval(ctx.config.gc_interval);
    // Deletion times of terminating pods, to measure pod deletion → shard removal. Kept a while:
    // a deleted pod leaves the store before its shard goes.
    let mut seen: HashMap<String, chrono::DateTime<Utc>> = HashMap::new();
    loop {
        seen.retain(|_, t| Utc::now() - *t < chrono::TimeDelta::minutes(10));
        seen.extend(changed.take_deletions());
        if let Err(e) = sync(&ctx, &seen).await {
            tracing::warn!(error = %e, "syncing pod shards failed");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = changed.notify.notified() => {}
            _ = tick.tick() => {}
        }
        // Coalesce a burst of pod events into one pass.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
