//! Leader election on a `coordination.k8s.io` Lease: only the holder reconciles, so two replicas
//! never both act. Losing the Lease stops the work; shutting down releases it.
use std::{future::Future, sync::Arc};

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

pub async fn run<F, Fut>(
    client: Client,
    lease: &str,
    namespace: &str,
    identity: &str,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    lead: F,
) -> anyhow::Result<()>
where
    F: Fn(CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let manager = LeaseManagerBuilder::new(client, lease)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await?;
    let (mut leading, task) = manager.watch().await;
    tracing::info!(identity, lease, namespace, "waiting for the leader Lease");
    loop {
        // Standby until this replica holds the Lease.
        while !*leading.borrow_and_update() {
            tokio::select! {
                _ = shutdown.cancelled() => return release(leading, task).await,
                r = leading.changed() => r?,
            }
        }
        tracing::info!(identity, "acquired the leader Lease: reconciling");
        metrics.leader.set(1);
        let stop = CancellationToken::new();
        let work = tokio::spawn(lead(stop.clone()));
        let lost = tokio::select! {
            _ = shutdown.cancelled() => false,
            r = async { loop { leading.changed().await?; if !*leading.borrow() { return Ok::<_, anyhow::Error>(()); } } } => { r?; true }
        };
        stop.cancel();
        let _ = work.await;
        metrics.leader.set(0);
        if !lost {
            return release(leading, task).await;
        }
        tracing::warn!(identity, "lost the leader Lease: stopped reconciling");
    }
}

async fn release(
    leading: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
) -> anyhow::Result<()> {
    // Closing the channel ends the manager's task, which hands the manager back for release.
    drop(leading);
    if let Ok(Ok(manager)) = task.await {
        manager.release().await?;
        tracing::info!("released the leader Lease");
    }
    Ok(())
}
