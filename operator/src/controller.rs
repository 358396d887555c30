//! The `EventConsumer` controller: each resource becomes a `highwater.consumers` row with its
//! shards; its status reports the shards; a finalizer applies the deletion policy.
use std::sync::Arc;

use futures::StreamExt;
use highwater::{
    definitions::{self, Definition},
    kubernetes, ops,
};
use highwater_crds::{DeletionPolicy, EventConsumer, EventConsumerStatus, Problem};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        Controller,
        controller::{Action, Config as ControllerConfig},
        finalizer::{Event as Finalizer, finalizer},
        watcher,
    },
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    Error, Result, annotations,
    context::Context,
    events::{self, Reason},
    status,
};

pub const FINALIZER: &str = "highwater.dev/cleanup";
const MANAGER: &str = "highwater-operator";

/// The `source` of the definition the resource declares.
pub fn source_of(ec: &EventConsumer) -> String {
    kubernetes::source(&ec.namespace().unwrap_or_default(), &ec.name_any())
}

pub async fn reconcile(ec: Arc<EventConsumer>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile_started();
    let api: Api<EventConsumer> = Api::namespaced(ctx.client.clone(), &ec.namespace().unwrap_or_default());
    finalizer(&api, FINALIZER, ec, |event| async {
        match event {
            Finalizer::Apply(ec) => apply(&ec, &ctx, &api).await,
            Finalizer::Cleanup(ec) => cleanup(&ec, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

pub fn error_policy(_ec: Arc<EventConsumer>, err: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "reconcile failed");
    ctx.metrics.reconcile_failed(err.metric_label());
    Action::requeue(std::time::Duration::from_secs(5))
}

async fn apply(ec: &EventConsumer, ctx: &Context, api: &Api<EventConsumer>) -> Result<Action> {
    let name = ec.consumer_name();
    let def = Definition { name: name.clone(), spec: ec.spec.clone(), source: source_of(ec) };
    let problem = match def.spec.validate(&name) {
        Err(e) => Some((Problem::InvalidSpec, e.to_string())),
        Ok(()) => match definitions::apply(&ctx.pool, std::slice::from_ref(&def)).await {
            Ok(_) => None,
            Err(highwater::Error::Conflict(m)) => Some((Problem::Conflict, m)),
            Err(highwater::Error::Refused(m)) => Some((Problem::InvalidSpec, m.to_string())),
            Err(e) => return Err(e.into()),
        },
    };
    let prev = ec.status.as_ref();
    if problem.is_none() && def.spec.delivery == highwater_crds::Delivery::PerInstance {
        register_pod_shards(ctx, ec, &name).await?;
    }
    let handled = if problem.is_none() { Some(annotations::handle(ctx, ec, &name, prev).await?) } else { None };
    // A conflicting resource must not report the owner's shards as its own.
    let rows = if problem.as_ref().is_some_and(|p| p.0 == Problem::Conflict) {
        Vec::new()
    } else {
        ops::status(&ctx.pool, Some(&name)).await?
    };
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let health = ctx.health.latest();
    let inputs = status::Inputs {
        consumer_name: &name,
        generation: ec.metadata.generation,
        suspended: ec.spec.suspend,
        problem: problem.clone(),
        previous: prev,
        now: &now,
        database: health.as_ref(),
    };
    let mut next = status::compute(&rows, &inputs);
    if let Some(h) = handled {
        next.handled_restart = h.restart;
        next.handled_skip = h.skip;
        next.handled_rebuild = h.rebuild;
        next.handled_redrive = h.redrive;
        next.handled_discard = h.discard;
        next.handled_replay = h.replay;
    }
    for s in status::newly_dead(prev, &next) {
        let note = format!(
            "shard {} is dead on event {}: {}",
            s.instance,
            s.failing_event_id.unwrap_or_default(),
            s.last_error.as_deref().unwrap_or("")
        );
        events::on(ctx, ec, Reason::ShardDead, note).await;
    }
    for s in status::newly_gone(prev, &next) {
        let note = format!("shard {} disabled: {}", s.instance, s.last_error.as_deref().unwrap_or(""));
        events::on(ctx, ec, Reason::ReceiverGone, note).await;
    }
    if let Some((problem, msg)) = &problem
        && prev.and_then(|p| p.state) != Some(problem.state())
    {
        events::on(ctx, ec, Reason::Refused(*problem), msg.clone()).await;
    }
    // Conditions keep their times while unchanged, so an unchanged status compares equal.
    if prev != Some(&next) {
        patch_status(api, &ec.name_any(), &next).await?;
    }
    Ok(Action::requeue(ctx.config.status_interval))
}

pub async fn patch_status(api: &Api<EventConsumer>, name: &str, status: &EventConsumerStatus) -> Result<()> {
    let patch = json!({"apiVersion": highwater_crds::API_VERSION, "kind": highwater_crds::KIND, "status": status});
    api.patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch)).await?;
    Ok(())
}

/// Registers a shard for every live dispatcher pod of the consumer's group right away, rather
/// than waiting for the next pod pass.
async fn register_pod_shards(ctx: &Context, ec: &EventConsumer, name: &str) -> Result<()> {
    let ns = ec.namespace().unwrap_or_default();
    let mut conn = ctx.pool.acquire().await.map_err(highwater::Error::from)?;
    for p in ctx.pods.state() {
        let in_group = p.labels().get(&ctx.config.group_label) == Some(&ec.spec.group);
        if p.namespace().as_deref() == Some(ns.as_str())
            && in_group
            && let Some(uid) = p.uid()
            && highwater::shards::register_for_pod(&mut conn, name, &p.name_any(), &uid).await?
        {
            ctx.metrics.shards_created.inc();
        }
    }
    Ok(())
}

async fn cleanup(ec: &EventConsumer, ctx: &Context) -> Result<Action> {
    let name = ec.consumer_name();
    let owner = kubernetes::consumer_source(&ctx.pool, &name).await?;
    // Never touch what another declaration owns (a refused conflicting resource).
    if owner.as_deref() != Some(source_of(ec).as_str()) {
        return Ok(Action::await_change());
    }
    match ec.spec.deletion_policy {
        DeletionPolicy::Delete => {
            definitions::delete(&ctx.pool, &name).await?;
            tracing::info!(consumer = %name, "resource deleted: consumer and cursors removed");
        }
        DeletionPolicy::Retain => {
            let by = ops::Audit {
                by: "kubernetes:highwater-operator".into(),
                reason: Some("its EventConsumer was deleted with deletionPolicy: Retain".into()),
            };
            match ops::disable(&ctx.pool, &name, None, &by).await {
                Ok(_) | Err(highwater::Error::Refused(_)) => {}
                Err(e) => return Err(e.into()),
            }
            tracing::info!(consumer = %name, "resource deleted: consumer retained, disabled");
        }
    }
    Ok(Action::await_change())
}

/// Runs the controller until `stop`.
pub async fn run(ctx: Arc<Context>, namespace: Option<&str>, concurrency: u16, stop: CancellationToken) {
    let api: Api<EventConsumer> = match namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let controller = Controller::new(api, watcher::Config::default().any_semantic())
        .with_config(ControllerConfig::default().concurrency(concurrency));
    let store = controller.store();
    let graceful = stop.clone();
    let run = controller
        .graceful_shutdown_on(async move { graceful.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "reconcile outcome");
            }
        });
    crate::stopping::run_controller(run, store, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use highwater_crds::{ConsumerState, EventConsumerStatus};
    use http::{Request, Response};
    use kube::client::Body;

    /// A mocked API server that expects the status to go to the status subresource as a
    /// server-side apply owned by the operator, and answers it.
    async fn expect_status_apply(mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>) {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method(), http::Method::PATCH);
        assert_eq!(req.uri().path(), "/apis/highwater.dev/v1alpha1/namespaces/shop/eventconsumers/orders/status");
        let query = req.uri().query().unwrap_or_default().to_owned();
        assert!(query.contains("fieldManager=highwater-operator") && query.contains("force=true"), "{query}");
        assert_eq!(req.headers()["content-type"], "application/apply-patch+yaml");
        let body: serde_json::Value = serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap();
        assert_eq!(body["apiVersion"], "highwater.dev/v1alpha1");
        assert_eq!(body["kind"], "EventConsumer");
        assert_eq!(body["status"]["state"], "Degraded");
        assert_eq!(body["status"]["totalLag"], 7);
        let answer = json!({"apiVersion": "highwater.dev/v1alpha1", "kind": "EventConsumer",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"delivery": "Shared", "sink": {"log": {}}}, "status": body["status"]});
        send.send_response(Response::builder().body(Body::from(serde_json::to_vec(&answer).unwrap())).unwrap());
    }

    #[tokio::test]
    async fn status_is_written_with_server_side_apply() {
        let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<EventConsumer> = Api::namespaced(kube::Client::new(svc, "default"), "shop");
        let server = tokio::spawn(expect_status_apply(handle));
        let status = EventConsumerStatus { state: Some(ConsumerState::Degraded), total_lag: 7, ..Default::default() };
        patch_status(&api, "orders", &status).await.unwrap();
        server.await.unwrap();
    }

    #[test]
    fn names_and_sources() {
        let mut ec = EventConsumer::new(
            "orders",
            serde_json::from_value(json!({"delivery": "Shared", "sink": {"log": {}}})).unwrap(),
        );
        ec.metadata.namespace = Some("shop".into());
        assert_eq!(ec.consumer_name(), "orders");
        assert_eq!(source_of(&ec), "kubernetes:shop/orders");
        ec.spec.consumer_name = Some("legacy-orders".into());
        assert_eq!(ec.consumer_name(), "legacy-orders");
    }
}
