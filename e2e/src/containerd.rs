//! containerd (Debian's package) for the real node's kubelet: everything under one directory
//! (root, state, socket, CNI configuration), runc through the CRI plugin with cgroupfs, the local
//! pause image as sandbox image, images loaded with `ctr images import` (no registry).
//!
//! Two settings this kind of machine needs, found by trying (docs/image.md):
//! - `restrict_oom_score_adj = true`: the kubelet gives the sandbox oom_score_adj -998, and
//!   lowering it is refused here (`nsexec: failed to update /proc/self/oom_score_adj: Permission
//!   denied`, surfacing as `runc create failed: … can't get final child's PID from pipe: EOF`);
//! - `disable_apparmor = true`: this kernel has no AppArmor (no /sys/module/apparmor).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, Result, bail};

use crate::{
    image::{output_ok, which_or},
    process::Process,
};

/// The CRI images namespace: what the kubelet sees.
pub const NAMESPACE: &str = "k8s.io";
/// Where Debian's containernetworking-plugins put the CNI plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

pub struct Containerd {
    process: Process,
    dir: PathBuf,
    ctr: PathBuf,
}

impl Containerd {
    /// Starts containerd in `dir` with `sandbox_image` as the pause image and the CNI
    /// configuration from `dir/cni`; returns once it answers.
    pub async fn start(dir: &Path, sandbox_image: &str, log: &Path) -> Result<Containerd> {
        let program = which_or("containerd", "apt-get install containerd; .ci/run does")?;
        let ctr = which_or("ctr", "apt-get install containerd; .ci/run does")?;
        which_or("runc", "apt-get install runc; .ci/run does")?;
        Containerd::start_with(&program, &ctr, dir, sandbox_image, log).await
    }

    /// [`Containerd::start`] with the given `containerd` and `ctr` programs.
    pub async fn start_with(
        program: &Path,
        ctr: &Path,
        dir: &Path,
        sandbox_image: &str,
        log: &Path,
    ) -> Result<Containerd> {
        for p in [program, ctr] {
            if !p.is_file() {
                bail!(
                    "{} is missing: the real node needs containerd (apt-get install containerd; .ci/run does)",
                    p.display()
                );
            }
        }
        let ctr = ctr.to_path_buf();
        if !Path::new(CNI_BIN_DIR).join("bridge").is_file() {
            bail!(
                "{CNI_BIN_DIR}/bridge is missing: the real node's pod network needs the CNI plugins (apt-get install containernetworking-plugins; .ci/run does)"
            );
        }
        std::fs::create_dir_all(dir.join("cni/net.d")).with_context(|| format!("creating {}", dir.display()))?;
        let config = dir.join("containerd.toml");
        std::fs::write(&config, config_toml(dir, sandbox_image))
            .with_context(|| format!("writing {}", config.display()))?;
        let mut command = Command::new(program);
        command.arg("--config").arg(&config);
        let mut containerd =
            Containerd { process: Process::spawn("containerd", command, log)?, dir: dir.to_path_buf(), ctr };
        let socket = containerd.socket();
        let ctr = containerd.ctr.clone();
        containerd
            .process
            .wait_ready("containerd answering on its socket", Duration::from_secs(30), || {
                let (ctr, socket) = (ctr.clone(), socket.clone());
                async move {
                    tokio::task::spawn_blocking(move || {
                        Command::new(ctr)
                            .arg("-a")
                            .arg(socket)
                            .arg("version")
                            .output()
                            .is_ok_and(|o| o.status.success())
                    })
                    .await
                    .unwrap_or(false)
                }
            })
            .await?;
        Ok(containerd)
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// The directory the CRI plugin reads CNI network configurations from.
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni/net.d")
    }

    /// `ctr -n k8s.io …`; its stdout, or an error with its stderr.
    pub fn ctr(&self, args: &[&str]) -> Result<String> {
        let mut c = Command::new(&self.ctr);
        c.arg("-a").arg(self.socket()).args(["-n", NAMESPACE]).args(args);
        output_ok(c)
    }

    /// Loads a docker-archive (`podman save`) into the kubelet's image namespace.
    pub fn import(&self, archive: &Path) -> Result<()> {
        self.ctr(&["images", "import", archive.to_str().context("path")?])
            .with_context(|| format!("importing {} into containerd", archive.display()))
            .map(drop)
    }

    /// Kills every container task left and deletes them, so no shim outlives the test, and
    /// removes the pods' network namespaces (bind mounts in /var/run/netns that the CRI plugin
    /// removes only when the kubelet stops a pod sandbox).
    pub fn kill_all(&self) {
        let mut namespaces = vec![];
        let containers = self.ctr(&["containers", "ls", "-q"]).unwrap_or_default();
        for id in containers.lines().map(str::trim).filter(|c| !c.is_empty()) {
            let info: serde_json::Value = self
                .ctr(&["containers", "info", id])
                .ok()
                .and_then(|i| serde_json::from_str(&i).ok())
                .unwrap_or_default();
            for ns in info["Spec"]["linux"]["namespaces"].as_array().into_iter().flatten() {
                if let Some(path) = ns["path"].as_str().filter(|p| ns["type"] == "network" && p.contains("/netns/cni-"))
                {
                    namespaces.push(path.to_owned());
                }
            }
        }
        let tasks = self.ctr(&["tasks", "ls", "-q"]).unwrap_or_default();
        for task in tasks.lines().map(str::trim).filter(|t| !t.is_empty()) {
            let _ = self.ctr(&["tasks", "kill", "-s", "SIGKILL", task]);
        }
        for task in tasks.lines().map(str::trim).filter(|t| !t.is_empty()) {
            let _ = self.ctr(&["tasks", "delete", "-f", task]);
        }
        for path in namespaces {
            let _ = Command::new("umount").arg(&path).output();
            let _ = std::fs::remove_file(&path);
        }
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.kill_all();
        self.process.stop();
    }
}

fn config_toml(dir: &Path, sandbox_image: &str) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  stream_server_address = "127.0.0.1"
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{d}/cni/net.d"
"#
    )
}
