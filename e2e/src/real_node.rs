//! A real node for the control plane: the kubelet ([`crate::kubelet`]) with containerd
//! ([`crate::containerd`]) and runc running pods as containers from the image the Dockerfile
//! builds ([`crate::image`]), loaded into containerd (`imagePullPolicy: Never`), on a bridge
//! network of the host's own ([`crate::pod_network`]). Pods reach the API server through the
//! `kubernetes` Service IP with their mounted service-account token, as in a cluster.
//!
//! Needs root (the kubelet, containerd and the bridge do) and holds a machine-wide lock while it
//! runs (one bridge, one set of kubepods cgroups). [`RealNode::stop`] lets the kubelet stop every
//! pod (their network namespaces go with them) before the processes stop; drop without it kills
//! the containers through containerd instead. Mounts under its directory (the kubelet's root,
//! pod volumes) are unmounted before the directory is removed.
use std::{
    fs::File,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::{Api, api::ListParams};
use tempfile::TempDir;

use crate::{
    ControlPlane,
    apiserver::SERVICE_IP,
    binaries,
    containerd::Containerd,
    image::{Engine, Image},
    kubelet::{Kubelet, NODE},
    pod_network::{GATEWAY, PodNetwork},
    proxy::Proxy,
    user::User,
};

/// Container states that mean the container cannot start: waiting for them is pointless.
const CANNOT_START: [&str; 9] = [
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "StartError",
    "CrashLoopBackOff",
];

pub struct RealNode {
    kubelet: Option<Kubelet>,
    proxies: Vec<Proxy>,
    network: Option<PodNetwork>,
    containerd: Option<Containerd>,
    /// The image the node has, as the chart names it (`repository:tag`).
    pub image: Image,
    /// From creating the directory to the node Ready (image build or cache hit included).
    pub startup: Duration,
    kubectl: PathBuf,
    admin_kubeconfig: PathBuf,
    dir: Option<TempDir>,
    _lock: nix::fcntl::Flock<File>,
}

impl RealNode {
    /// Builds (or reuses) the image from the binaries in `programs` (e.g. target/debug), starts
    /// containerd with it and joins a kubelet to `cp` (which needs kube-scheduler, and the
    /// controllers that make service-account tokens and `kube-root-ca.crt`: see
    /// [`CONTROLLERS`]). Returns once the node is Ready.
    pub async fn start(cp: &ControlPlane, programs: &Path) -> Result<RealNode> {
        let identity = cp.user(&format!("system:node:{NODE}"), &["system:nodes"]).await?;
        RealNode::start_as(cp, programs, &identity, Duration::from_secs(90)).await
    }

    /// [`RealNode::start`] with the kubelet authenticating as `identity`, and failing when the
    /// node is not Ready within `join_timeout`, with the kubelet's last errors.
    pub async fn start_as(
        cp: &ControlPlane,
        programs: &Path,
        identity: &User,
        join_timeout: Duration,
    ) -> Result<RealNode> {
        if !nix::unistd::geteuid().is_root() {
            bail!("the real node needs root (the kubelet, containerd and a network bridge): run the test as root");
        }
        let lock = tokio::task::spawn_blocking(machine_lock).await??;
        let started = Instant::now();
        let dir = tempfile::Builder::new().prefix("highwater-node-").tempdir()?;
        let engine = tokio::task::spawn_blocking(Engine::new).await?.context("the container engine")?;
        let (image, pause, archives) = {
            let (engine, programs, root) = (engine.clone(), programs.to_path_buf(), dir.path().to_path_buf());
            tokio::task::spawn_blocking(move || -> Result<_> {
                let image = engine.image(&programs)?;
                let pause = engine.pause_image()?;
                let archives = [root.join("image.tar"), root.join("pause.tar")];
                engine.save(&image.name, &archives[0])?;
                engine.save(&pause, &archives[1])?;
                Ok((image, pause, archives))
            })
            .await??
        };
        let mut node = RealNode {
            kubelet: None,
            proxies: vec![],
            network: None,
            containerd: None,
            image,
            startup: Duration::ZERO,
            kubectl: cp.binaries().path(binaries::KUBECTL),
            admin_kubeconfig: cp.kubeconfig_path().to_path_buf(),
            dir: Some(dir),
            _lock: lock,
        };
        let root = node.dir().to_path_buf();
        let containerd = Containerd::start(&root.join("containerd"), &pause, &root.join("containerd.log")).await?;
        for archive in &archives {
            containerd.import(archive)?;
            std::fs::remove_file(archive)?;
        }
        node.network = Some(PodNetwork::create(&containerd.cni_conf_dir(), &root.join("ipam"))?);
        let socket = containerd.socket();
        node.containerd = Some(containerd);
        // The `kubernetes` Service, for in-cluster clients (see crate::pod_network).
        let apiserver: SocketAddr =
            cp.server_url().trim_start_matches("https://").parse().context("the API server's address")?;
        let proxy = node.network().forward(SERVICE_IP, 443, apiserver).await?;
        node.proxies.push(proxy);

        let mut kubelet = Kubelet::start(
            &cp.binaries().path(binaries::KUBELET),
            identity.kubeconfig_path(),
            &cp.pki().ca_cert(),
            &socket,
            &root.join("kubelet"),
        )?;
        let ready = kubelet.wait_ready(&cp.client(), join_timeout).await;
        node.kubelet = Some(kubelet);
        ready.context("joining the kubelet to the control plane")?;
        node.startup = started.elapsed();
        Ok(node)
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the node's directory lives as long as the node").path()
    }

    fn network(&self) -> &PodNetwork {
        self.network.as_ref().expect("the network is made at start")
    }

    /// Makes `upstream` (a loopback service of the test, e.g. PostgreSQL) reachable from pods;
    /// returns the address they use (on the bridge's [`GATEWAY`]).
    pub async fn expose(&mut self, upstream: SocketAddr) -> Result<SocketAddr> {
        let proxy = self.network().forward(GATEWAY, 0, upstream).await?;
        let address = format!("{GATEWAY}:{}", proxy.port()).parse()?;
        self.proxies.push(proxy);
        Ok(address)
    }

    /// Builds (or reuses) the image of the programs in `programs` under `repository` and
    /// imports it into the node's containerd, e.g. an earlier release's image beside this
    /// build's (see [`crate::image::release_repository`]).
    pub async fn load_image(&self, programs: &Path, repository: &str) -> Result<Image> {
        let engine = tokio::task::spawn_blocking(Engine::new).await?.context("the container engine")?;
        let archive = self.dir().join(format!("{}.tar", repository.replace('/', "_")));
        let (programs, repository, to) = (programs.to_path_buf(), repository.to_owned(), archive.clone());
        let image = tokio::task::spawn_blocking(move || -> Result<Image> {
            let image = engine.image_in(&programs, &repository)?;
            engine.save(&image.name, &to)?;
            Ok(image)
        })
        .await??;
        self.containerd().import(&archive)?;
        std::fs::remove_file(&archive)?;
        Ok(image)
    }

    pub fn containerd(&self) -> &Containerd {
        self.containerd.as_ref().expect("containerd runs")
    }

    pub fn kubelet(&self) -> &Kubelet {
        self.kubelet.as_ref().expect("the kubelet runs")
    }

    /// Waits until exactly `n` pods matching `selector` in `namespace` (not being deleted) are
    /// Ready, returning their names; fails at once, with the reason and the container's last log
    /// lines, when one of their containers cannot start (image missing, command not found,
    /// crashing), and when the kubelet exits.
    pub async fn wait_pods_ready(
        &mut self,
        client: &kube::Client,
        namespace: &str,
        selector: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<String>> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let deadline = Instant::now() + timeout;
        let mut last: String;
        loop {
            self.kubelet.as_mut().expect("the kubelet runs").process().check_running()?;
            match pods.list(&ListParams::default().labels(selector)).await {
                Err(e) => last = format!("listing pods: {e}"),
                Ok(list) => {
                    let live: Vec<&Pod> =
                        list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
                    for pod in &live {
                        if let Some(reason) = cannot_start(pod) {
                            let name = pod.metadata.name.clone().unwrap_or_default();
                            let log = self.kubelet().container_log(namespace, &name, &reason.0);
                            let tail: Vec<&str> = log.lines().rev().take(10).collect();
                            bail!(
                                "pod {namespace}/{name}: container {} cannot start: {}\n--- its log ---\n{}",
                                reason.0,
                                reason.1,
                                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                            );
                        }
                    }
                    let ready: Vec<String> =
                        live.iter().filter(|p| is_ready(p)).filter_map(|p| p.metadata.name.clone()).collect();
                    if live.len() == n && ready.len() == n {
                        return Ok(ready);
                    }
                    last = format!("{} pods, {} Ready: {ready:?}", live.len(), ready.len());
                }
            }
            if Instant::now() > deadline {
                return Err(anyhow!("{n} Ready pods {selector} in {namespace} within {timeout:?}; last seen: {last}"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// What the node is doing, for a failure message: every pod and Job with their status, the
    /// last events, each container's last log lines and the kubelet's last errors. A `helm
    /// install` that times out says only "context deadline exceeded"; this says why.
    pub fn explain(&self) -> String {
        let kubectl = |args: &[&str]| {
            let mut c = Command::new(&self.kubectl);
            c.arg(format!("--kubeconfig={}", self.admin_kubeconfig.display())).args(args);
            crate::image::output_ok(c).unwrap_or_else(|e| format!("kubectl {args:?}: {e:#}"))
        };
        let mut out = String::new();
        out += &kubectl(&["get", "nodes,pods,jobs", "--all-namespaces", "-o", "wide"]);
        out += "\n--- the last events ---\n";
        let events = kubectl(&["get", "events", "--all-namespaces", "--sort-by=.lastTimestamp"]);
        out += &last_lines(&events, 30);
        let pods = kubectl(&[
            "get",
            "pods",
            "--all-namespaces",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name} {.spec.initContainers[*].name} {.spec.containers[*].name}{\"\\n\"}{end}",
        ]);
        for line in pods.lines() {
            let mut words = line.split_whitespace();
            let (Some(ns), Some(pod)) = (words.next(), words.next()) else { continue };
            for container in words {
                let log = self.kubelet().container_log(ns, pod, container);
                out += &format!("\n--- {ns}/{pod} {container}: its last log lines ---\n{}", last_lines(&log, 15));
            }
        }
        if let Some(dir) = &self.dir {
            for (name, file) in [("kubelet", "kubelet/kubelet.log"), ("containerd", "containerd.log")] {
                let log = std::fs::read_to_string(dir.path().join(file)).unwrap_or_default();
                let errors: String = log
                    .lines()
                    .filter(|l| l.starts_with('E') || l.contains("level=error"))
                    .fold(String::new(), |a, l| a + l + "\n");
                out += &format!("\n--- the {name}'s last errors ---\n{}", last_lines(&errors, 15));
            }
        }
        out
    }

    /// Deletes every workload and pod, waits until the kubelet has stopped them (network
    /// namespaces and volumes released), then stops everything.
    pub async fn stop(mut self) -> Result<()> {
        let kubectl = |args: &[&str]| {
            let mut c = Command::new(&self.kubectl);
            c.arg(format!("--kubeconfig={}", self.admin_kubeconfig.display())).args(args);
            crate::image::output_ok(c)
        };
        let run = || -> Result<()> {
            kubectl(&["delete", "deployments,replicasets,jobs", "--all", "--all-namespaces", "--wait=false"])?;
            kubectl(&["delete", "pods", "--all", "--all-namespaces", "--grace-period=5", "--timeout=60s"])?;
            Ok(())
        };
        let stopped = tokio::task::block_in_place(run);
        drop(self.kubelet.take());
        stopped.context("stopping the node's pods")
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        // The kubelet first (it would restart what containerd kills), then the containers.
        drop(self.kubelet.take());
        drop(self.containerd.take());
        self.proxies.clear();
        drop(self.network.take());
        if let Some(dir) = self.dir.take() {
            unmount_under(dir.path());
            if std::thread::panicking() {
                let _ = std::fs::remove_dir_all(dir.path().join("containerd/root"));
                eprintln!("real node logs kept in {}", dir.keep().display());
            }
        }
    }
}

/// The controllers a control plane needs for the real node's pods, besides the default ones:
/// `kube-root-ca.crt` in every namespace (the projected service-account volume mounts it), and
/// Jobs (the chart's migration hook).
pub const CONTROLLERS: [&str; 2] = ["root-ca-certificate-publisher-controller", "job-controller"];

/// Pod `Ready` condition true.
fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// (container, "reason: message") of a container that cannot start.
fn cannot_start(pod: &Pod) -> Option<(String, String)> {
    let statuses: Vec<&ContainerStatus> = pod
        .status
        .iter()
        .flat_map(|s| s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten()))
        .collect();
    statuses.into_iter().find_map(|c| {
        let state = c.state.as_ref()?;
        let (reason, message) = match (&state.waiting, &state.terminated) {
            (Some(w), _) => (w.reason.clone()?, w.message.clone().unwrap_or_default()),
            (_, Some(t)) => (t.reason.clone()?, t.message.clone().unwrap_or_default()),
            _ => return None,
        };
        let previous = c.last_state.as_ref().and_then(|l| l.terminated.as_ref()).map(|t| {
            format!(" (last exit {}: {})", t.exit_code, t.message.clone().or(t.reason.clone()).unwrap_or_default())
        });
        CANNOT_START
            .contains(&reason.as_str())
            .then(|| (c.name.clone(), format!("{reason}: {message}{}", previous.unwrap_or_default())))
    })
}

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n") + "\n"
}

/// One real node per machine at a time: the bridge and the kubepods cgroups are the machine's.
fn machine_lock() -> Result<nix::fcntl::Flock<File>> {
    let path = crate::cache_dir()?.join("real-node.lock");
    std::fs::create_dir_all(path.parent().expect("a parent"))?;
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", path.display()))
}

/// Unmounts (lazily, deepest first) every mount under `dir`: the kubelet bind-mounts its root
/// directory onto itself and mounts pod volumes (tmpfs) below it.
fn unmount_under(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let prefix = dir.to_string_lossy().into_owned();
    let mut points: Vec<&str> =
        info.lines().filter_map(|l| l.split_whitespace().nth(4)).filter(|p| p.starts_with(&prefix)).collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    for p in points {
        let _ = Command::new("umount").args(["-l", p]).output();
    }
}
