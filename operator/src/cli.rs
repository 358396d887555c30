//! `highwater-operator` (`run` by default) and `highwater-operator crd`.
use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use clap::{Args, Parser, Subcommand};
use highwater_crds::EventConsumer;
use kube::{Api, Client, api::ListParams};
use tokio_util::sync::CancellationToken;

use crate::{context, controller, doctor, event_types, http, leader, metrics::Metrics, pods};

#[derive(Parser, Debug)]
#[command(name = "highwater-operator", version = highwater::VERSION, about = "Kubernetes operator for highwater EventConsumers")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print a CustomResourceDefinition as YAML (EventConsumer unless named).
    Crd {
        #[arg(value_enum, default_value = "eventconsumer")]
        kind: CrdKind,
    },
    /// Print a field reference of docs/operator.md, generated from the CRD (EventConsumer unless named).
    Reference {
        #[arg(value_enum, default_value = "eventconsumer")]
        kind: CrdKind,
    },
}

/// The resources of the operator.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrdKind {
    Eventconsumer,
    Eventtype,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// PostgreSQL URL of the highwater database.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "HIGHWATER_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Label naming a dispatcher pod's group.
    #[arg(long, default_value = context::GROUP_LABEL)]
    pub group_label: String,
    /// Apply the schema migrations at start (otherwise only check them).
    #[arg(long, env = "HIGHWATER_MIGRATE")]
    pub migrate: bool,
    /// HTTP server for /metrics, /healthz, /readyz.
    #[arg(long, env = "HIGHWATER_OPERATOR_LISTEN", default_value = "0.0.0.0:8081")]
    pub listen: String,
    /// Take part in leader election on a Lease (disable only when a single replica runs).
    #[arg(long, env = "HIGHWATER_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    #[arg(long, env = "HIGHWATER_LEASE_NAME", default_value = "highwater-operator")]
    pub lease_name: String,
    /// Namespace of the Lease (the operator's own, via the downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// This replica's identity (the pod name, via the downward API).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub status_interval: Duration,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub gc_interval: Duration,
    /// How often each EventType's status (stored events per version) is refreshed.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub event_type_interval: Duration,
    /// Concurrent reconciles; keep it below the database pool size.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u16,
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// How often `highwater doctor`'s checks run for the `DatabaseHealthy` condition (0s: never).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub doctor_interval: Duration,
    /// A transaction holding the fence back longer than this makes `DatabaseHealthy` False.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub doctor_long_transaction: Duration,
    /// Log format on stderr: `text` (coloured only on a terminal) or `json` (one object per line).
    #[arg(long, env = "HIGHWATER_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: highwater::logging::LogFormat,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Crd { kind: CrdKind::Eventconsumer }) => {
            print!("{}", highwater_crds::crd_yaml());
            Ok(())
        }
        Some(Command::Crd { kind: CrdKind::Eventtype }) => {
            print!("{}", highwater_crds::event_type_crd_yaml());
            Ok(())
        }
        Some(Command::Reference { kind: CrdKind::Eventconsumer }) => {
            print!("{}", highwater_crds::reference_markdown());
            Ok(())
        }
        Some(Command::Reference { kind: CrdKind::Eventtype }) => {
            print!("{}", highwater_crds::event_type_reference_markdown());
            Ok(())
        }
        None => operate(cli.run).await,
    }
}

async fn operate(a: RunArgs) -> anyhow::Result<()> {
    highwater::logging::init_tracing_with(a.log_format, "info,sqlx=warn,kube=warn");
    let shutdown = highwater::shutdown::shutdown_signal();
    let url = a
        .database_url
        .clone()
        .ok_or_else(|| anyhow::anyhow!("no database given\n  fix: set DATABASE_URL or pass --database-url"))?;
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!(
            "cannot build a Kubernetes client ({e})\n  fix: run in a pod with a service account, or set KUBECONFIG"
        )
    })?;
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let listen: std::net::SocketAddr = a.listen.parse().map_err(|e| anyhow::anyhow!("--listen {:?}: {e}", a.listen))?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}\n  fix: pass another --listen"))?;
    tokio::spawn(http::serve(listener, metrics.clone(), ready.clone(), shutdown.clone()));

    let pool = tokio::select! {
        p = highwater::db::connect_with_retry(&url, u32::from(a.concurrency) * 2 + 4, a.connect_timeout) => p?,
        _ = shutdown.cancelled() => return Ok(()),
    };
    if a.migrate {
        highwater::db::migrate(&pool).await?;
    } else {
        highwater::db::check_migrated(&pool, &url).await?;
    }
    check_crd(&client, a.namespace.as_deref()).await?;
    let types = event_types::available(&client, a.namespace.as_deref()).await?;
    ready.store(true, std::sync::atomic::Ordering::Relaxed);

    let identity = a.identity.clone().unwrap_or_else(|| format!("highwater-operator-{}", uuid_like()));
    let mut config = context::Config::new(&identity);
    config.group_label = a.group_label.clone();
    config.status_interval = a.status_interval;
    config.gc_interval = a.gc_interval;
    config.event_type_interval = a.event_type_interval;
    config.namespace = a.namespace.clone();

    let lead = |stop: CancellationToken| {
        let (client, pool, metrics, config, ns) =
            (client.clone(), pool.clone(), metrics.clone(), config.clone(), a.namespace.clone());
        let concurrency = a.concurrency;
        let (url, doctor_interval, long_tx) = (url.clone(), a.doctor_interval, a.doctor_long_transaction);
        async move {
            let health = Arc::new(doctor::Health::default());
            let doctor_task = (!doctor_interval.is_zero())
                .then(|| tokio::spawn(doctor::run(url, health.clone(), doctor_interval, long_tx, stop.clone())));
            let changed = Arc::new(pods::PodChanges::default());
            let pods = pods::reflect(client.clone(), ns.as_deref(), &config.group_label, changed.clone(), stop.clone());
            let ctx = Arc::new(context::Context::new(client, pool, metrics, config, pods, health));
            let pod_task = tokio::spawn(pods::run(ctx.clone(), changed, stop.clone()));
            let type_task = types.then(|| {
                let (ctx, ns, stop) = (ctx.clone(), ns.clone(), stop.clone());
                tokio::spawn(async move { event_types::run(ctx, ns.as_deref(), concurrency, stop).await })
            });
            controller::run(ctx, ns.as_deref(), concurrency, stop).await;
            let _ = pod_task.await;
            if let Some(t) = type_task {
                let _ = t.await;
            }
            if let Some(t) = doctor_task {
                let _ = t.await;
            }
        }
    };
    // The operations its annotations run (restart, skip, rebuild, redrive, …) are spans of
    // service `highwater-operator`, exported under the same OTEL_* variables as the dispatcher's
    // (refused at start, as there, when they ask for what it cannot do).
    let traces = highwater::trace::config::from_env(|k| std::env::var(k).ok())
        .and_then(|cfg| highwater::trace::init(cfg, "highwater-operator", &identity, ""))?;
    if a.leader_election {
        leader::run(client.clone(), &a.lease_name, &a.lease_namespace, &identity, metrics.clone(), shutdown, lead)
            .await?;
    } else {
        metrics.leader.set(1);
        lead(shutdown).await;
    }
    if let Some(t) = traces {
        t.shutdown(std::time::Duration::from_secs(2)).await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Refuses to run before the CRD is installed, with the command that installs it.
async fn check_crd(client: &Client, namespace: Option<&str>) -> anyhow::Result<()> {
    let api: Api<EventConsumer> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Err(anyhow::anyhow!(
            "the EventConsumer CRD (eventconsumers.highwater.dev) is not installed\n  fix: kubectl apply -f \
             crds/eventconsumer.yaml (or: highwater-operator crd | kubectl apply -f -)"
        )),
        Err(e) => Err(anyhow::anyhow!("cannot list EventConsumers: {e}")),
    }
}

fn uuid_like() -> String {
    format!("{:x}", std::process::id() as u64 ^ chrono::Utc::now().timestamp_micros() as u64)
}

#[cfg(test)]
mod tests {
    use ::http::{Request, Response};
    use kube::client::Body;

    use super::*;

    #[tokio::test]
    async fn refuses_to_start_without_its_crd_and_says_how_to_install_it() {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("a list request");
            assert_eq!(req.uri().path(), "/apis/highwater.dev/v1alpha1/eventconsumers");
            let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404});
            send.send_response(
                Response::builder().status(404).body(Body::from(serde_json::to_vec(&status).unwrap())).unwrap(),
            );
        });
        let e = check_crd(&client, None).await.unwrap_err().to_string();
        server.await.unwrap();
        assert!(e.contains("CRD (eventconsumers.highwater.dev) is not installed"), "{e}");
        assert!(e.contains("kubectl apply -f crds/eventconsumer.yaml"), "{e}");
    }
}
