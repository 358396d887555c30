//! `nats-server` v2.15 with JetStream, built from its Go module into the e2e cache, on a free
//! loopback port with its store in a temporary directory.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use highwater_e2e::brokers::nats::{Nats, NatsOptions};
//! let mut nats = Nats::start(NatsOptions::default()).await?;
//! let url = nats.url(); // "nats://127.0.0.1:<port>"
//! nats.kill();
//! nats.restart().await?; // same port, same JetStream store
//! # Ok(()) }
//! ```
use std::{path::PathBuf, process::Command, time::Duration};

use anyhow::Result;
use highwater::embedded::free_port;
use tempfile::TempDir;

use crate::process::Process;

pub const MODULE: &str = "github.com/nats-io/nats-server/v2";
pub const VERSION: &str = "v2.15.2";
const READY_LINE: &str = "Server is ready";

#[derive(Clone, Debug, Default)]
pub struct NatsOptions {
    /// The client port; default a free one (e.g. a proxy's upstream).
    pub port: Option<u16>,
    /// Require this user and password.
    pub user: Option<(String, String)>,
    /// Require this token (`--auth`) instead.
    pub token: Option<String>,
    /// Require TLS with this PEM certificate and key (e.g. from [`crate::pki::Pki`]).
    pub tls: Option<(PathBuf, PathBuf)>,
}

pub struct Nats {
    process: Process,
    binary: PathBuf,
    dir: TempDir,
    port: u16,
    opts: NatsOptions,
    starts: u32,
}

impl Nats {
    pub async fn start(opts: NatsOptions) -> Result<Nats> {
        let binary = crate::gomod::install(MODULE, VERSION).await?;
        let dir = tempfile::Builder::new().prefix("highwater-nats-").tempdir()?;
        let port = match opts.port {
            Some(p) => p,
            None => free_port()?,
        };
        let process = spawn(&binary, &dir, port, &opts, 0)?;
        let mut nats = Nats { process, binary, dir, port, opts, starts: 1 };
        nats.wait_ready().await?;
        Ok(nats)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let log = self.process.log_path().to_path_buf();
        super::wait_for_line(&mut self.process, &log, READY_LINE, Duration::from_secs(30)).await
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same port and JetStream store, after [`Nats::kill`].
    pub async fn restart(&mut self) -> Result<()> {
        self.process.kill();
        self.process = spawn(&self.binary, &self.dir, self.port, &self.opts, self.starts)?;
        self.starts += 1;
        self.wait_ready().await
    }
}

fn spawn(binary: &PathBuf, dir: &TempDir, port: u16, opts: &NatsOptions, n: u32) -> Result<Process> {
    let mut c = Command::new(binary);
    c.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir.path().join("store"))
        .arg("--server_name")
        .arg("e2e");
    if let Some((user, pass)) = &opts.user {
        c.args(["--user", user, "--pass", pass]);
    }
    if let Some(token) = &opts.token {
        c.args(["--auth", token]);
    }
    if let Some((cert, key)) = &opts.tls {
        c.arg("--tls").arg("--tlscert").arg(cert).arg("--tlskey").arg(key);
    }
    Process::spawn("nats-server", c, &dir.path().join(format!("nats-{n}.log")))
}
