//! The control-plane binaries: the directory `$HIGHWATER_E2E_BIN` names, or the one
//! `e2e/control-plane/build.sh` prints after building what its cache lacks (minutes on a fresh
//! machine, a few milliseconds after that). Found once per process.
use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
};

use anyhow::{Context, Result, anyhow, bail};

pub const ETCD: &str = "etcd";
pub const KUBE_APISERVER: &str = "kube-apiserver";
pub const KUBE_CONTROLLER_MANAGER: &str = "kube-controller-manager";
pub const KUBE_SCHEDULER: &str = "kube-scheduler";
pub const KUBECTL: &str = "kubectl";
pub const KWOK: &str = "kwok";
pub const KUBELET: &str = "kubelet";

/// Every binary build.sh makes (and a `$HIGHWATER_E2E_BIN` directory must hold).
pub const ALL: [&str; 7] = [ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KUBECTL, KWOK, KUBELET];

#[derive(Clone, Debug)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// `$HIGHWATER_E2E_BIN` if set, else the build script's output. The first call in a process
    /// does the work (in the blocking pool); later calls, and calls after a failure, share its
    /// result.
    pub async fn get() -> Result<Binaries> {
        static FOUND: OnceLock<Result<Binaries, String>> = OnceLock::new();
        tokio::task::spawn_blocking(|| {
            FOUND
                .get_or_init(|| {
                    let found = match std::env::var_os("HIGHWATER_E2E_BIN") {
                        Some(dir) => Binaries::at(dir).context("HIGHWATER_E2E_BIN"),
                        None => Binaries::build(),
                    };
                    found.map_err(|e| format!("{e:#}"))
                })
                .clone()
                .map_err(|e| anyhow!(e))
        })
        .await?
    }

    /// A directory that holds every binary of [`ALL`].
    pub fn at(dir: impl Into<PathBuf>) -> Result<Binaries> {
        let dir = dir.into();
        let missing: Vec<&str> = ALL.iter().copied().filter(|b| !dir.join(b).is_file()).collect();
        if !missing.is_empty() {
            bail!("{} lacks {} (build them with {})", dir.display(), missing.join(", "), build_script().display());
        }
        Ok(Binaries { dir })
    }

    /// Runs the build script: its progress goes straight to stderr (past the test harness's
    /// capture, since a cold build takes minutes), its last stdout line is the directory.
    pub fn build() -> Result<Binaries> {
        let script = build_script();
        let mut child = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", script.display()))?;
        let stderr = child.stderr.take().expect("piped");
        let mut tail: Vec<String> = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            let _ = writeln!(std::io::stderr(), "{line}");
            tail.push(line);
            if tail.len() > 30 {
                tail.remove(0);
            }
        }
        let output = child.wait_with_output().with_context(|| format!("running {}", script.display()))?;
        if !output.status.success() {
            bail!(
                "building the control plane failed: {} exited with {}\n--- last lines ---\n{}",
                script.display(),
                output.status,
                tail.join("\n")
            );
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let dir = stdout.lines().last().unwrap_or_default().trim();
        Binaries::at(dir).with_context(|| format!("{} printed {dir:?}", script.display()))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of one binary, e.g. `binaries.path(binaries::KUBECTL)`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// `e2e/control-plane/build.sh` of this checkout.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("control-plane").join("build.sh")
}
