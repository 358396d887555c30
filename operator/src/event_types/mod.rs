//! The `EventType` controller: each resource is applied to the event type registry
//! ([`registry::apply`], one transaction); its status reports the latest registered version and
//! the stored events per version, refreshed every `--event-type-interval`. A refused version
//! leaves the registry unchanged, shows as the `Refused` condition and a `VersionRefused`
//! Warning event. Deleting a resource never removes the type from the registry: stored events
//! name it (docs/operator.md, "EventType").
pub mod registry;
pub mod status;

use std::sync::Arc;

use futures::StreamExt;
use highwater_crds::{EventType, EventTypeStatus};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams},
    runtime::{
        Controller,
        controller::{Action, Config as ControllerConfig},
        reflector::Store,
        watcher,
    },
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    Error, Result,
    context::Context,
    events::{self, Reason},
};
use status::Problem;

const MANAGER: &str = "highwater-operator";

/// What every `EventType` reconcile shares: the operator's context and the watched resources
/// (to find another resource that declares the same type).
pub struct TypeContext {
    pub ctx: Arc<Context>,
    pub store: Store<EventType>,
}

/// Of the resources that declare `et`'s event type, the owner: the oldest, then by
/// namespace/name. `None` when `et` is the owner.
pub fn owner_other_than<'a>(et: &EventType, all: impl IntoIterator<Item = &'a EventType>) -> Option<String> {
    let key = |e: &EventType| (e.metadata.creation_timestamp.clone(), e.namespace().unwrap_or_default(), e.name_any());
    let mine = key(et);
    all.into_iter()
        .filter(|o| o.spec.event_type == et.spec.event_type && o.metadata.deletion_timestamp.is_none())
        .filter(|o| key(o) != mine)
        .filter(|o| key(o) < mine)
        .min_by_key(|o| key(o))
        .map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()))
}

pub async fn reconcile(et: Arc<EventType>, tc: Arc<TypeContext>) -> Result<Action> {
    let ctx = &tc.ctx;
    let _timer = ctx.metrics.reconcile_started();
    if et.metadata.deletion_timestamp.is_some() {
        // The type stays registered (stored events name it); nothing to clean up.
        return Ok(Action::await_change());
    }
    let ns = et.namespace().unwrap_or_default();
    let api: Api<EventType> = Api::namespaced(ctx.client.clone(), &ns);
    let name = &et.spec.event_type;
    let others: Vec<Arc<EventType>> = tc.store.state();
    let problem = match owner_other_than(&et, others.iter().map(|o| o.as_ref())) {
        Some(owner) => Some(Problem::Conflict(format!(
            "event type {name:?} is declared by EventType {owner}; this resource is not applied\n  fix: delete one of \
             the two resources (one declaration per type)"
        ))),
        None => match registry::apply(&ctx.pool, &et.spec).await? {
            registry::Outcome::Applied { registered, latest, notes } => {
                if !registered.is_empty() {
                    tracing::info!(event_type = %name, ?registered, latest, "versions registered");
                }
                for n in notes {
                    tracing::info!(event_type = %name, "{n}");
                }
                None
            }
            registry::Outcome::Refused(m) => Some(Problem::Refused(m)),
        },
    };
    let counts = match problem {
        Some(Problem::Conflict(_)) => Vec::new(),
        _ => registry::counts(&ctx.pool, name).await?,
    };
    let prev = et.status.as_ref();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let next = status::compute(&status::Inputs {
        generation: et.metadata.generation,
        problem: problem.as_ref(),
        counts: &counts,
        previous: prev,
        now: &now,
    });
    if status::newly_refused(prev, &next) {
        let (reason, note) = match &problem {
            Some(Problem::Conflict(m)) => (Reason::TypeConflict, m.clone()),
            Some(Problem::Refused(m)) => (Reason::VersionRefused, m.clone()),
            None => unreachable!("refused without a problem"),
        };
        tracing::warn!(event_type = %name, resource = %format!("{ns}/{}", et.name_any()), "{note}");
        events::on_object(ctx, et.as_ref(), reason, note).await;
    }
    let added = status::newly_registered(prev, &next);
    if problem.is_none() && !added.is_empty() {
        let list = added.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
        let note = format!("{name}: version(s) {list} registered, latest {}", next.latest_version.unwrap_or_default());
        tracing::info!(event_type = %name, "{note}");
        events::on_object(ctx, et.as_ref(), Reason::VersionsRegistered, note).await;
    }
    if prev != Some(&next) {
        patch_status(&api, &et.name_any(), &next).await?;
    }
    Ok(Action::requeue(ctx.config.event_type_interval))
}

pub fn error_policy(_et: Arc<EventType>, err: &Error, tc: Arc<TypeContext>) -> Action {
    tracing::warn!(error = %err, "EventType reconcile failed");
    tc.ctx.metrics.reconcile_failed(err.metric_label());
    Action::requeue(std::time::Duration::from_secs(5))
}

pub async fn patch_status(api: &Api<EventType>, name: &str, status: &EventTypeStatus) -> Result<()> {
    let patch =
        json!({"apiVersion": highwater_crds::API_VERSION, "kind": highwater_crds::EVENT_TYPE_KIND, "status": status});
    api.patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch)).await?;
    Ok(())
}

fn api(client: &Client, namespace: Option<&str>) -> Api<EventType> {
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Whether the `EventType` CRD is installed and readable. The operator runs without it (an
/// install that predates it), saying how to add it; only `EventConsumer`s are then reconciled.
pub async fn available(client: &Client, namespace: Option<&str>) -> anyhow::Result<bool> {
    match api(client, namespace).list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            tracing::warn!(
                "the EventType CRD (eventtypes.highwater.dev) is not installed: EventType resources are not \
                 reconciled\n  fix: kubectl apply -f crds/eventtype.yaml (or: highwater-operator crd eventtype | \
                 kubectl apply -f -) and restart the operator"
            );
            Ok(false)
        }
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(
                "the operator may not list EventTypes ({}): EventType resources are not reconciled\n  fix: grant \
                 get/list/watch on eventtypes.highwater.dev and patch on eventtypes/status (the chart's RBAC does)",
                e.message
            );
            Ok(false)
        }
        Err(e) => Err(anyhow::anyhow!("cannot list EventTypes: {e}")),
    }
}

/// Runs the controller until `stop`.
pub async fn run(ctx: Arc<Context>, namespace: Option<&str>, concurrency: u16, stop: CancellationToken) {
    let controller = Controller::new(api(&ctx.client, namespace), watcher::Config::default().any_semantic())
        .with_config(ControllerConfig::default().concurrency(concurrency));
    let store = controller.store();
    let tc = Arc::new(TypeContext { ctx, store: store.clone() });
    let graceful = stop.clone();
    let run = controller
        .graceful_shutdown_on(async move { graceful.cancelled().await })
        .run(reconcile, error_policy, tc)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "EventType reconcile outcome");
            }
        });
    crate::stopping::run_controller(run, store, stop).await;
}

#[cfg(test)]
mod tests {
    use ::http::{Request, Response};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::client::Body;

    use super::*;

    /// The operator's answer to a list of EventTypes answered with `code`.
    async fn available_when(code: u16) -> anyhow::Result<bool> {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("a list request");
            assert_eq!(req.uri().path(), "/apis/highwater.dev/v1alpha1/namespaces/shop/eventtypes");
            let body = if code == 200 {
                json!({"apiVersion": "highwater.dev/v1alpha1", "kind": "EventTypeList", "metadata": {}, "items": []})
            } else {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "no", "code": code})
            };
            send.send_response(
                Response::builder().status(code).body(Body::from(serde_json::to_vec(&body).unwrap())).unwrap(),
            );
        });
        let r = available(&client, Some("shop")).await;
        server.await.unwrap();
        r
    }

    #[tokio::test]
    async fn runs_without_the_event_type_crd_or_the_right_to_list_it() {
        assert!(available_when(200).await.unwrap());
        assert!(!available_when(404).await.unwrap(), "no CRD: EventConsumers only");
        assert!(!available_when(403).await.unwrap(), "no RBAC: EventConsumers only");
        assert!(available_when(500).await.is_err(), "anything else stops the start");
    }

    fn et(ns: &str, name: &str, ty: &str, secs: i64) -> EventType {
        let mut e = EventType::new(
            name,
            serde_json::from_value(json!({"eventType": ty, "versions": [{"version": 1}]})).unwrap(),
        );
        e.metadata.namespace = Some(ns.into());
        e.metadata.creation_timestamp =
            Some(Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap()));
        e
    }

    #[test]
    fn the_oldest_declaration_of_a_type_owns_it() {
        let a = et("shop", "orders", "OrderPlaced", 0);
        let b = et("billing", "orders", "OrderPlaced", 10);
        let c = et("shop", "cancel", "OrderCancelled", 5);
        let all = [a.clone(), b.clone(), c.clone()];
        assert_eq!(owner_other_than(&a, &all), None);
        assert_eq!(owner_other_than(&b, &all).as_deref(), Some("shop/orders"));
        assert_eq!(owner_other_than(&c, &all), None);
        // Same age: namespace/name decides.
        let d = et("alpha", "orders", "OrderPlaced", 0);
        assert_eq!(owner_other_than(&a, [&a, &d]).as_deref(), Some("alpha/orders"));
    }
}
