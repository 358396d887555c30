use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Client,
    core::PartialObjectMeta,
    runtime::{
        events::{Recorder, Reporter},
        reflector::Store,
    },
};
use sqlx::PgPool;

use crate::metrics::Metrics;

/// Settings of the operator process.
#[derive(Clone, Debug)]
pub struct Config {
    /// Label that names a dispatcher pod's group (`highwater.dev/group: orders`).
    pub group_label: String,
    /// How often each resource's status is refreshed from its shard rows.
    pub status_interval: Duration,
    /// How often shards are compared with live pods (besides every pod event).
    pub gc_interval: Duration,
    /// How often each `EventType`'s status (events per version) is refreshed.
    pub event_type_interval: Duration,
    /// Identity in Kubernetes Events and the Lease.
    pub identity: String,
    /// The one namespace watched, if any: consumers of other namespaces are not this
    /// operator's to garbage-collect (it cannot see their pods).
    pub namespace: Option<String>,
}

impl Config {
    pub fn new(identity: &str) -> Self {
        Config {
            group_label: GROUP_LABEL.to_owned(),
            status_interval: Duration::from_secs(10),
            gc_interval: Duration::from_secs(30),
            event_type_interval: Duration::from_secs(60),
            identity: identity.to_owned(),
            namespace: None,
        }
    }
}

pub const GROUP_LABEL: &str = "highwater.dev/group";
/// The `reportingController` of the operator's Kubernetes Events.
pub const REPORTER: &str = "highwater-operator";

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub pool: PgPool,
    pub metrics: Arc<Metrics>,
    pub config: Config,
    /// Dispatcher pods (metadata only, label-selected).
    pub pods: Store<PartialObjectMeta<Pod>>,
    /// Publishes every Kubernetes Event of this replica (one recorder, so they aggregate).
    pub recorder: Recorder,
    /// The latest `highwater doctor` findings (the `DatabaseHealthy` condition).
    pub health: Arc<crate::doctor::Health>,
}

impl Context {
    pub fn new(
        client: Client,
        pool: PgPool,
        metrics: Arc<Metrics>,
        config: Config,
        pods: Store<PartialObjectMeta<Pod>>,
        health: Arc<crate::doctor::Health>,
    ) -> Self {
        let reporter = Reporter { controller: REPORTER.into(), instance: Some(config.identity.clone()) };
        let recorder = Recorder::new(client.clone(), reporter);
        Context { client, pool, metrics, config, pods, recorder, health }
    }
}
