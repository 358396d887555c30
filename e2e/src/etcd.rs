//! etcd: one member on free loopback ports, data in a directory the control plane removes.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Result;
use highwater::embedded::free_port;

use crate::process::{Process, retry_on_port_clash};

pub struct Etcd {
    process: Process,
    client_url: String,
    data_dir: PathBuf,
}

impl Etcd {
    /// Starts etcd with its data in `data_dir` and its log at `log`, and waits until its client
    /// port accepts connections.
    pub async fn start(program: &Path, data_dir: &Path, log: &Path) -> Result<Etcd> {
        retry_on_port_clash(|| async {
            let client_url = format!("http://127.0.0.1:{}", free_port()?);
            let peer_url = format!("http://127.0.0.1:{}", free_port()?);
            let mut command = Command::new(program);
            command
                .arg("--name=e2e")
                .arg(format!("--data-dir={}", data_dir.display()))
                .arg(format!("--listen-client-urls={client_url}"))
                .arg(format!("--advertise-client-urls={client_url}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=e2e={peer_url}"))
                // Thrown away after the test: durability buys nothing, fsync costs seconds.
                .arg("--unsafe-no-fsync")
                .arg("--log-level=warn");
            let mut process = Process::spawn("etcd", command, log)?;
            let address = client_url.trim_start_matches("http://").to_string();
            process
                .wait_ready("client port", Duration::from_secs(30), || async {
                    tokio::net::TcpStream::connect(&address).await.is_ok()
                })
                .await?;
            Ok(Etcd { process, client_url, data_dir: data_dir.to_path_buf() })
        })
        .await
    }

    /// `http://127.0.0.1:<port>`, for `--etcd-servers`.
    pub fn client_url(&self) -> &str {
        &self.client_url
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}
