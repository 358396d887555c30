//! One identity on the control plane: its kubeconfig file, a kube client and kubectl, all
//! authenticating with the same client certificate.
use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    process::{Output, Stdio},
};

use anyhow::{Context, Result, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::AsyncWriteExt;

use crate::{kubeconfig, pki::Pki};

#[derive(Clone)]
pub struct User {
    name: String,
    kubeconfig: PathBuf,
    config: kube::Config,
    kubectl: PathBuf,
    cache_dir: PathBuf,
}

impl User {
    /// Issues a certificate for `name` in `groups` and writes `<dir>/<file>.kubeconfig`.
    pub async fn create(
        pki: &Pki,
        dir: &Path,
        file: &str,
        server: &str,
        name: &str,
        groups: &[&str],
        kubectl: &Path,
    ) -> Result<User> {
        let cert = pki.client_cert(file, name, groups)?;
        let path = dir.join(format!("{file}.kubeconfig"));
        kubeconfig::write(&path, server, &pki.ca_cert(), name, &cert)?;
        let parsed = Kubeconfig::read_from(&path).with_context(|| format!("reading {}", path.display()))?;
        let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading {}", path.display()))?;
        // Fails here, not in every later `client()`, if the TLS setup is unusable.
        kube::Client::try_from(config.clone()).with_context(|| format!("a client from {}", path.display()))?;
        Ok(User {
            name: name.to_string(),
            kubeconfig: path,
            config,
            kubectl: kubectl.to_path_buf(),
            cache_dir: dir.join("kubectl-cache"),
        })
    }

    /// The user name the API server sees (the certificate's CN).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// A new client (call it on the runtime that will use it).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config.clone()).expect("checked when the user was created")
    }

    /// kubectl with `--kubeconfig` (and a discovery cache inside the control plane's directory).
    pub fn kubectl_command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.kubectl);
        command
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir);
        command.kill_on_drop(true);
        command
    }

    /// Runs kubectl with `args`; the caller checks the status.
    pub async fn kubectl<I, S>(&self, args: I) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = self.kubectl_command();
        command.args(args);
        command.output().await.with_context(|| format!("running {}", self.kubectl.display()))
    }

    /// Runs kubectl with `args` and `input` on its stdin (`apply -f -`); the caller checks the status.
    pub async fn kubectl_with_input<I, S>(&self, args: I, input: &str) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = self.kubectl_command();
        command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().with_context(|| format!("running {}", self.kubectl.display()))?;
        let mut stdin = child.stdin.take().context("kubectl's stdin")?;
        stdin.write_all(input.as_bytes()).await.context("writing to kubectl")?;
        drop(stdin);
        child.wait_with_output().await.context("waiting for kubectl")
    }

    /// Runs kubectl with `args` and returns its stdout; an error with stderr if it fails.
    pub async fn kubectl_ok<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<S> = args.into_iter().collect();
        let out = self.kubectl(&args).await?;
        if !out.status.success() {
            let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
            bail!(
                "kubectl {} as {} failed ({}): {}",
                shown.join(" "),
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
