//! End-to-end harnesses for highwater: a real Kubernetes control plane (etcd, kube-apiserver and
//! optionally kube-controller-manager, built from their published Go modules by
//! `e2e/control-plane/build.sh`) that a test starts and drops.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let cp = highwater_e2e::ControlPlane::with_controller_manager().await?;
//! let client = cp.client(); // kube::Client as cluster-admin
//! let namespaces = cp.kubectl_ok(["get", "namespaces", "-o", "name"]).await?;
//! assert!(namespaces.contains("namespace/default"));
//! # Ok(()) }
//! ```
//!
//! One module per job: [`binaries`] finds or builds the binaries, [`pki`] makes the certificates,
//! [`kubeconfig`] writes kubeconfig files, [`process`] runs and stops the processes, [`etcd`],
//! [`apiserver`], [`controller_manager`], [`scheduler`] and [`kwok`] know their component's flags,
//! [`user`] is one identity's kubeconfig, `kubectl` and client, [`control_plane`] puts them
//! together. [`pod_runner`] runs the Pods on kwok's fake node as local processes, [`helm`] installs
//! charts, [`prometheus`] runs a real Prometheus and queries it, [`pod_monitor`] turns a PodMonitor
//! into its scrape targets. [`image`] builds the container image from the repository's Dockerfile
//! with buildah and runs it with podman, offline; [`real_node`] joins a real kubelet ([`kubelet`],
//! [`containerd`], [`pod_network`]) that runs the chart's pods as containers from it. [`chaos`] (faults under load, then an audit; the `chaos` binary and
//! `tests/chaos_short.rs`) drives dispatchers through [`proxy`], a loopback TCP proxy that cuts,
//! black-holes or slows their database connections (docs/reliability.md). [`brokers`] runs real
//! Kafka and NATS JetStream servers for the broker sinks' tests, [`jaeger`] a real trace backend
//! for the tracing test.
// `process` sets a parent-death signal between fork and exec (its one `unsafe` block).
#![deny(unsafe_code)]

pub mod apiserver;
pub mod bench;
pub mod binaries;
pub mod brokers;
pub mod chaos;
pub mod containerd;
pub mod control_plane;
pub mod controller_manager;
pub mod etcd;
pub mod gomod;
pub mod helm;
pub mod image;
pub mod jaeger;
pub mod kubeconfig;
pub mod kubelet;
pub mod kwok;
pub mod pki;
pub mod pod_monitor;
pub mod pod_network;
pub mod pod_runner;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod real_node;
pub mod scheduler;
pub mod upgrade;
pub mod user;
pub mod wait;

pub use binaries::Binaries;
pub use control_plane::{ControlPlane, ControlPlaneBuilder};
pub use pod_runner::PodRunner;
pub use user::User;
pub use wait::{eventually, wait_for};

/// `$HIGHWATER_E2E_CACHE`, else `~/.cache/highwater-e2e`: where the control plane, helm, the
/// benchmark peers and Go modules are built and kept between runs.
pub fn cache_dir() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    match std::env::var_os("HIGHWATER_E2E_CACHE") {
        Some(c) => Ok(c.into()),
        None => {
            Ok(std::path::PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?)
                .join(".cache/highwater-e2e"))
        }
    }
}
