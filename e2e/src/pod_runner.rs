//! Stands in for the kubelet on the fake node: for each Pod that kwok reports Running there, runs
//! its first container's command as a real local process, and SIGTERMs it when the Pod gets a
//! deletion timestamp (or is gone). Programs are looked up by name in one directory (e.g.
//! target/debug for `highwater` and `highwater-operator`).
//!
//! The process gets the environment the container declares: `value`, `valueFrom.fieldRef`
//! (`metadata.name`, `metadata.namespace`, `metadata.uid`, `spec.nodeName`,
//! `spec.serviceAccountName`) and `valueFrom.secretKeyRef` (read from the Secret). A
//! `--listen=…` argument gets a free loopback port instead. A Pod that mounts its ServiceAccount
//! token (`automountServiceAccountToken` not false) gets `KUBECONFIG`, a kubeconfig with a token
//! of that ServiceAccount from `kubectl create token`, so RBAC applies as in a cluster.
use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result, anyhow, bail};
use highwater::embedded::free_port;
use k8s_openapi::{
    ByteString,
    api::core::v1::{Container, Pod, Secret},
};
use kube::{Api, ResourceExt, api::ListParams};

use crate::{ControlPlane, binaries, kwok, process::Process};

/// One process the runner started for a Pod.
pub struct Running {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    /// The port `--listen` was given, if the container had one.
    pub port: Option<u16>,
    pub process: Process,
    /// SIGTERM was sent (the Pod is being deleted or gone).
    pub terminating: bool,
}

/// Where `cargo test --workspace` built `highwater` and `highwater-operator` for the running test
/// binary (target/<profile>): the programs the pod runner runs. Panics with the build command when
/// one is missing.
pub fn built_programs() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>").to_path_buf();
    for bin in ["highwater", "highwater-operator"] {
        assert!(
            dir.join(bin).is_file(),
            "{} is missing: run `cargo build --bins -p highwater -p highwater-operator` (or `cargo test --workspace`)",
            dir.join(bin).display()
        );
    }
    dir
}

#[derive(Clone)]
struct Setup {
    client: kube::Client,
    programs: PathBuf,
    logs: PathBuf,
    server: String,
    ca: PathBuf,
    kubectl: PathBuf,
    admin_kubeconfig: PathBuf,
}

pub struct PodRunner {
    running: Arc<Mutex<HashMap<String, Running>>>,
    task: tokio::task::JoinHandle<()>,
    logs: PathBuf,
}

impl PodRunner {
    /// Starts watching (polling every 100 ms) the Pods bound to [`kwok::NODE`]. Programs come from
    /// `programs`, logs go to `logs/<namespace>_<pod>.log`.
    pub fn start(cp: &ControlPlane, programs: &Path, logs: &Path) -> Result<PodRunner> {
        std::fs::create_dir_all(logs).with_context(|| format!("creating {}", logs.display()))?;
        let setup = Setup {
            client: cp.client(),
            programs: programs.to_path_buf(),
            logs: logs.to_path_buf(),
            server: cp.server_url().to_owned(),
            ca: cp.pki().ca_cert(),
            kubectl: cp.binaries().path(binaries::KUBECTL),
            admin_kubeconfig: cp.kubeconfig_path().to_path_buf(),
        };
        let running = Arc::new(Mutex::new(HashMap::new()));
        let task = tokio::spawn(run(setup, running.clone()));
        Ok(PodRunner { running, task, logs: logs.to_path_buf() })
    }

    /// Calls `f` with the processes by Pod uid (running, terminating and exited ones).
    pub fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Running>) -> T) -> T {
        f(&mut self.running.lock().expect("pod runner lock"))
    }

    /// Names of the Pods in `namespace` whose process still runs.
    pub fn alive(&self, namespace: &str) -> Vec<String> {
        let mut pods: Vec<String> = self.with(|m| {
            m.values_mut()
                .filter_map(|r| (r.namespace == namespace && r.process.exited().is_none()).then(|| r.pod.clone()))
                .collect()
        });
        pods.sort();
        pods
    }

    /// The log of a Pod's process.
    pub fn log(&self, namespace: &str, pod: &str) -> String {
        std::fs::read_to_string(self.logs.join(format!("{namespace}_{pod}.log"))).unwrap_or_default()
    }

    pub fn logs_dir(&self) -> &Path {
        &self.logs
    }
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        self.task.abort();
        if let Ok(mut m) = self.running.lock() {
            for r in m.values_mut() {
                r.process.kill();
            }
        }
    }
}

async fn run(setup: Setup, running: Arc<Mutex<HashMap<String, Running>>>) {
    let pods: Api<Pod> = Api::all(setup.client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={}", kwok::NODE));
    let mut failed = HashSet::new();
    loop {
        match pods.list(&params).await {
            Ok(list) => {
                let seen: HashMap<String, &Pod> = list.items.iter().map(|p| (p.uid().unwrap_or_default(), p)).collect();
                // Stop what is being deleted or gone.
                {
                    let mut m = running.lock().expect("pod runner lock");
                    for (uid, r) in m.iter_mut() {
                        let deleting = seen.get(uid).is_none_or(|p| p.metadata.deletion_timestamp.is_some());
                        if deleting && !r.terminating {
                            r.process.terminate();
                            r.terminating = true;
                        }
                    }
                }
                for pod in &list.items {
                    let uid = pod.uid().unwrap_or_default();
                    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                    if phase != Some("Running")
                        || pod.metadata.deletion_timestamp.is_some()
                        || failed.contains(&uid)
                        || running.lock().expect("pod runner lock").contains_key(&uid)
                    {
                        continue;
                    }
                    let name = pod.name_any();
                    let namespace = pod.namespace().unwrap_or_default();
                    // A port handed to a process that has not bound it yet is still "free" to the
                    // next probe: two pods started in one round got the same one (the operator then
                    // failed with "Address already in use" and its pod stayed without a process).
                    let given: HashSet<u16> =
                        running.lock().expect("pod runner lock").values().filter_map(|r| r.port).collect();
                    match start(&setup, pod, &given).await {
                        Ok((process, port)) => {
                            running.lock().expect("pod runner lock").insert(
                                uid.clone(),
                                Running { namespace, pod: name, uid, port, process, terminating: false },
                            );
                        }
                        Err(e) => {
                            // Reported once; the Pod stays without a process.
                            eprintln!("pod runner: cannot run pod {namespace}/{name}: {e:#}");
                            let log = setup.logs.join(format!("{namespace}_{name}.log"));
                            let _ = std::fs::write(&log, format!("pod runner: {e:#}\n"));
                            failed.insert(uid);
                        }
                    }
                }
            }
            Err(e) => eprintln!("pod runner: listing pods: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A free loopback port that is not one of `given` (ports of processes that may not have bound
/// them yet).
fn unused_port(given: &HashSet<u16>) -> Result<u16> {
    for _ in 0..100 {
        let p = free_port()?;
        if !given.contains(&p) {
            return Ok(p);
        }
    }
    bail!("no free loopback port outside the {} given to running pods", given.len())
}

/// Starts the process of `pod`'s first container.
async fn start(setup: &Setup, pod: &Pod, given: &HashSet<u16>) -> Result<(Process, Option<u16>)> {
    let name = pod.name_any();
    let namespace = pod.namespace().unwrap_or_default();
    let spec = pod.spec.as_ref().context("pod without spec")?;
    let container: &Container = spec.containers.first().context("pod without containers")?;
    let mut argv: Vec<String> = container.command.clone().unwrap_or_default();
    argv.extend(container.args.clone().unwrap_or_default());
    if argv.is_empty() {
        bail!("container {} has no command (the image's entrypoint is unknown here)", container.name);
    }
    let program = setup.programs.join(&argv[0]);
    if !program.is_file() {
        bail!("{} is not built", program.display());
    }
    let mut port = None;
    let mut args = Vec::new();
    let mut iter = argv[1..].iter();
    while let Some(a) = iter.next() {
        if a == "--listen" || a.starts_with("--listen=") {
            if a == "--listen" {
                iter.next();
            }
            let p = unused_port(given)?;
            port = Some(p);
            args.push(format!("--listen=127.0.0.1:{p}"));
        } else {
            args.push(a.clone());
        }
    }
    let mut command = Command::new(&program);
    command.args(&args).env_clear();
    for key in ["PATH", "HOME", "TMPDIR", "LANG"] {
        if let Some(v) = std::env::var_os(key) {
            command.env(key, v);
        }
    }
    for var in container.env.clone().unwrap_or_default() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => {
                if let Some(field) = &from.field_ref {
                    match field.field_path.as_str() {
                        "metadata.name" => name.clone(),
                        "metadata.namespace" => namespace.clone(),
                        "metadata.uid" => pod.uid().unwrap_or_default(),
                        "spec.nodeName" => spec.node_name.clone().unwrap_or_default(),
                        "spec.serviceAccountName" => spec.service_account_name.clone().unwrap_or_default(),
                        other => bail!("env {}: fieldRef {other} is not supported", var.name),
                    }
                } else if let Some(secret) = &from.secret_key_ref {
                    let secrets: Api<Secret> = Api::namespaced(setup.client.clone(), &namespace);
                    let s = secrets
                        .get(&secret.name)
                        .await
                        .with_context(|| format!("env {}: secret {}", var.name, secret.name))?;
                    let bytes: Option<&ByteString> = s.data.as_ref().and_then(|d| d.get(&secret.key));
                    match bytes {
                        Some(b) => String::from_utf8(b.0.clone())?,
                        None => bail!("env {}: secret {} has no key {}", var.name, secret.name, secret.key),
                    }
                } else {
                    bail!("env {}: only fieldRef and secretKeyRef are supported", var.name);
                }
            }
            (None, None) => String::new(),
        };
        command.env(&var.name, value);
    }
    if spec.automount_service_account_token != Some(false) {
        let account = spec.service_account_name.clone().unwrap_or_else(|| "default".into());
        let kubeconfig = setup.logs.join(format!("{namespace}_{name}.kubeconfig"));
        write_token_kubeconfig(setup, &namespace, &account, &kubeconfig).await?;
        command.env("KUBECONFIG", &kubeconfig);
    }
    let log = setup.logs.join(format!("{namespace}_{name}.log"));
    let process = Process::spawn(&format!("pod {namespace}/{name}"), command, &log)?;
    Ok((process, port))
}

/// A kubeconfig authenticating as ServiceAccount `account` with a token from `kubectl create token`.
async fn write_token_kubeconfig(setup: &Setup, namespace: &str, account: &str, path: &Path) -> Result<()> {
    let out = tokio::process::Command::new(&setup.kubectl)
        .args(["create", "token", account, "-n", namespace, "--duration=2h"])
        .env("KUBECONFIG", &setup.admin_kubeconfig)
        .output()
        .await
        .context("running kubectl create token")?;
    if !out.status.success() {
        return Err(anyhow!("kubectl create token {account} -n {namespace}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let token = String::from_utf8(out.stdout)?.trim().to_owned();
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: {server}
    certificate-authority: \"{ca}\"
users:
- name: {account}
  user:
    token: {token}
contexts:
- name: e2e
  context:
    cluster: e2e
    user: {account}
    namespace: {namespace}
current-context: e2e
",
        server = setup.server,
        ca = setup.ca.display(),
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
