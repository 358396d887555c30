//! The control plane a test starts: etcd, kube-apiserver and optionally kube-controller-manager,
//! everything in one temporary directory (certificates, kubeconfigs, etcd data, logs). Dropping
//! it stops the processes and removes the directory; when the thread is panicking the logs stay
//! and their directory is printed.
use std::{
    ffi::OsStr,
    io::Write,
    path::{Path, PathBuf},
    process::Output,
    sync::atomic::{AtomicUsize, Ordering},
};

use anyhow::{Context, Result};
use highwater::embedded::free_port;
use tempfile::TempDir;

use crate::{
    apiserver::{self, ApiServer},
    binaries::{self, Binaries},
    controller_manager::{self, ControllerManager},
    etcd::Etcd,
    kwok::Kwok,
    pki::Pki,
    process::retry_on_port_clash,
    scheduler::{self, Scheduler},
    user::User,
};

/// The admin's user name; it is in `system:masters`, so RBAC allows it everything.
pub const ADMIN: &str = "highwater-e2e-admin";

/// What to run besides etcd and kube-apiserver.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct ControlPlaneBuilder {
    controllers: Option<Vec<String>>,
    scheduler: bool,
    kwok: bool,
}

impl ControlPlaneBuilder {
    /// Runs kube-controller-manager with [`controller_manager::DEFAULT_CONTROLLERS`].
    pub fn controller_manager(self) -> Self {
        self.controllers(controller_manager::DEFAULT_CONTROLLERS)
    }

    /// Runs kube-controller-manager with exactly these controllers (its `--controllers` names).
    pub fn controllers<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.controllers = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Runs kube-scheduler (as `system:kube-scheduler`).
    pub fn scheduler(mut self) -> Self {
        self.scheduler = true;
        self
    }

    /// Runs kwok with one fake Node ([`crate::kwok::NODE`]), and kube-scheduler to bind Pods to
    /// it: Pods become Running (nothing runs them; see [`crate::pod_runner`]) and their deletion
    /// completes.
    pub fn kwok(mut self) -> Self {
        self.kwok = true;
        self.scheduler = true;
        self
    }

    /// Builds the binaries if need be (see [`Binaries::get`]), starts everything, and returns once
    /// the API server is ready (and the controller manager's controllers run).
    pub async fn start(self) -> Result<ControlPlane> {
        let binaries = Binaries::get().await?;
        let dir = tempfile::Builder::new()
            .prefix("highwater-cp-")
            .tempdir()
            .context("creating the control plane's temporary directory")?;
        match self.start_in(dir.path(), binaries).await {
            Ok(mut control_plane) => {
                control_plane.dir = Some(dir);
                Ok(control_plane)
            }
            Err(e) => Err(e.context(format!("starting the control plane; logs kept in {}", keep_logs(dir).display()))),
        }
    }

    async fn start_in(self, root: &Path, binaries: Binaries) -> Result<ControlPlane> {
        let logs = root.join("logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let kubectl = binaries.path(binaries::KUBECTL);
        let pki = Pki::generate(&root.join("pki"), &apiserver::SERVING_NAMES)?;
        let etcd = Etcd::start(&binaries.path(binaries::ETCD), &root.join("etcd"), &logs.join("etcd.log")).await?;
        let (apiserver, admin) = retry_on_port_clash(|| async {
            let mut apiserver = ApiServer::start(
                &binaries.path(binaries::KUBE_APISERVER),
                &pki,
                etcd.client_url(),
                free_port()?,
                &logs.join("kube-apiserver.log"),
            )?;
            let admin =
                User::create(&pki, root, "admin", apiserver.url(), ADMIN, &["system:masters"], &kubectl).await?;
            apiserver.wait_ready(&admin.client()).await?;
            Ok((apiserver, admin))
        })
        .await?;
        let controller_manager = match &self.controllers {
            None => None,
            Some(controllers) => {
                let identity = User::create(
                    &pki,
                    root,
                    "kube-controller-manager",
                    apiserver.url(),
                    controller_manager::USER,
                    &[],
                    &kubectl,
                )
                .await?;
                let mut manager = ControllerManager::start(
                    &binaries.path(binaries::KUBE_CONTROLLER_MANAGER),
                    &pki,
                    identity.kubeconfig_path(),
                    controllers,
                    &logs.join("kube-controller-manager.log"),
                )?;
                manager.wait_ready(&admin.client()).await?;
                Some(manager)
            }
        };
        let scheduler = match self.scheduler {
            false => None,
            true => {
                let identity =
                    User::create(&pki, root, "kube-scheduler", apiserver.url(), scheduler::USER, &[], &kubectl).await?;
                let mut scheduler = Scheduler::start(
                    &binaries.path(binaries::KUBE_SCHEDULER),
                    identity.kubeconfig_path(),
                    &logs.join("kube-scheduler.log"),
                )?;
                scheduler.process().check_running()?;
                Some(scheduler)
            }
        };
        let kwok = match self.kwok {
            false => None,
            true => {
                let mut kwok =
                    Kwok::start(&binaries.path(binaries::KWOK), admin.kubeconfig_path(), &logs.join("kwok.log"))?;
                kwok.create_node(&admin.client()).await?;
                Some(kwok)
            }
        };
        Ok(ControlPlane {
            kwok,
            scheduler,
            controller_manager,
            apiserver,
            etcd,
            admin,
            pki,
            binaries,
            root: root.to_path_buf(),
            dir: None,
            users: AtomicUsize::new(0),
        })
    }
}

pub struct ControlPlane {
    kwok: Option<Kwok>,
    scheduler: Option<Scheduler>,
    controller_manager: Option<ControllerManager>,
    apiserver: ApiServer,
    etcd: Etcd,
    admin: User,
    pki: Pki,
    binaries: Binaries,
    root: PathBuf,
    /// Set once everything runs; removed on drop.
    dir: Option<TempDir>,
    users: AtomicUsize,
}

// Tests hold one across awaits on multi-threaded runtimes and share it between tasks.
const _: fn() = || {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<ControlPlane>();
};

impl ControlPlane {
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    /// etcd and kube-apiserver only: the API works, nothing reconciles (no ReplicaSets from
    /// Deployments, and no Pods, since no controller makes the `default` ServiceAccounts).
    pub async fn start() -> Result<ControlPlane> {
        Self::builder().start().await
    }

    /// With kube-controller-manager running [`controller_manager::DEFAULT_CONTROLLERS`].
    pub async fn with_controller_manager() -> Result<ControlPlane> {
        Self::builder().controller_manager().start().await
    }

    /// The cluster-admin identity (group `system:masters`).
    pub fn admin(&self) -> &User {
        &self.admin
    }

    /// The admin's kubeconfig file.
    pub fn kubeconfig_path(&self) -> &Path {
        self.admin.kubeconfig_path()
    }

    /// A kube client as the admin.
    pub fn client(&self) -> kube::Client {
        self.admin.client()
    }

    /// The admin's client configuration.
    pub fn config(&self) -> kube::Config {
        self.admin.config()
    }

    /// kubectl as the admin; the caller checks the status.
    pub async fn kubectl<I, S>(&self, args: I) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.admin.kubectl(args).await
    }

    /// kubectl as the admin with `input` on its stdin; the caller checks the status.
    pub async fn kubectl_with_input<I, S>(&self, args: I, input: &str) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.admin.kubectl_with_input(args, input).await
    }

    /// kubectl as the admin; its stdout, or an error with its stderr.
    pub async fn kubectl_ok<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.admin.kubectl_ok(args).await
    }

    /// A kubectl command as the admin, for stdin or environment of one's own.
    pub fn kubectl_command(&self) -> tokio::process::Command {
        self.admin.kubectl_command()
    }

    /// A new identity: user `name` in `groups`, with no RBAC bindings unless the groups carry some.
    pub async fn user(&self, name: &str, groups: &[&str]) -> Result<User> {
        let n = self.users.fetch_add(1, Ordering::Relaxed);
        let file: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let kubectl = self.binaries.path(binaries::KUBECTL);
        User::create(&self.pki, &self.root, &format!("user-{n}-{file}"), self.server_url(), name, groups, &kubectl)
            .await
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        self.apiserver.url()
    }

    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// The temporary directory holding everything.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// `etcd.log`, `kube-apiserver.log`, `kube-controller-manager.log`, `kube-scheduler.log`, `kwok.log`.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// Prints how to reach the control plane and blocks until Ctrl-C: for poking at it with
    /// kubectl. Dropping a control plane does this first when `HIGHWATER_E2E_KEEP=1`.
    pub fn hold(&self) {
        let text = format!(
            "\ncontrol plane up at {} (logs in {})\n  export KUBECONFIG={}\n  export PATH={}:$PATH   # kubectl and the rest\npress Ctrl-C to stop it\n",
            self.server_url(),
            self.logs_dir().display(),
            self.kubeconfig_path().display(),
            self.binaries.dir().display(),
        );
        // Straight to stderr, past the test harness's output capture.
        let _ = std::io::stderr().write_all(text.as_bytes());
        // Its own thread and runtime: this may run inside another runtime, or in `drop`.
        let _ = std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|runtime| runtime.block_on(tokio::signal::ctrl_c()))
        })
        .join();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if std::env::var("HIGHWATER_E2E_KEEP").is_ok_and(|v| !v.is_empty() && v != "0") {
            self.hold();
        }
        if let Some(kwok) = &mut self.kwok {
            kwok.process().stop();
        }
        if let Some(scheduler) = &mut self.scheduler {
            scheduler.process().stop();
        }
        if let Some(manager) = &mut self.controller_manager {
            manager.process().stop();
        }
        self.apiserver.process().stop();
        self.etcd.process().stop();
        if let Some(dir) = self.dir.take()
            && std::thread::panicking()
        {
            eprintln!("control plane logs kept in {}", keep_logs(dir).display());
        }
    }
}

/// Keeps the directory without the bulky etcd data and returns the logs' path.
fn keep_logs(dir: TempDir) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir.path().join("etcd"));
    let _ = std::fs::remove_dir_all(dir.path().join("kubectl-cache"));
    dir.keep().join("logs")
}
