//! Streaming replicas of an embedded server, for the tests of what highwater does against a hot
//! standby (refuses at once) and across a failover (the standby promoted and moved to the
//! primary's address, as a DNS name or a Kubernetes Service would move: dispatchers reconnect).
use std::time::Duration;

use super::{EmbeddedPostgres, chown, free_port};
use crate::{Error, Result};

impl EmbeddedPostgres {
    /// A hot standby of this server on a free port: `pg_basebackup -R` (it writes
    /// `standby.signal` and `primary_conninfo`), then started. Read-only until [`promote`]d.
    ///
    /// [`promote`]: EmbeddedPostgres::promote
    pub async fn start_standby(&self) -> Result<EmbeddedPostgres> {
        let dir = tempfile::Builder::new()
            .prefix("highwater-pg-standby-")
            .tempdir()
            .map_err(Error::io("creating the standby's directory"))?;
        if let Some(u) = &self.run_as {
            chown(dir.path(), Some(u.uid), Some(u.gid))
                .map_err(|e| Error::Embedded(format!("chown of {}: {e}", dir.path().display())))?;
        }
        let mut standby = EmbeddedPostgres {
            dir: Some(dir),
            bindir: self.bindir.clone(),
            port: free_port()?,
            run_as: self.run_as.clone(),
            child: None,
            settings: self.settings.clone(),
        };
        let port = self.port.to_string();
        let out = standby
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-X", "stream", "-R", "-c", "fast", "-D"])
            .arg(standby.data_dir())
            .output()
            .map_err(Error::io("running pg_basebackup"))?;
        if !out.status.success() {
            return Err(Error::Embedded(format!("pg_basebackup failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        standby.spawn().await?;
        Ok(standby)
    }

    /// Promotes a standby and waits until it accepts writes.
    pub async fn promote(&self) -> Result<()> {
        let pool = sqlx::PgPool::connect(&self.url()).await?;
        let promoted: bool = sqlx::query_scalar("SELECT pg_promote(true, 60)").fetch_one(&pool).await?;
        pool.close().await;
        if !promoted {
            return Err(Error::Embedded("pg_promote did not finish within 60 s".into()));
        }
        Ok(())
    }

    /// Stops the server and starts it on `port` (the address a failed primary had).
    pub async fn restart_on(&mut self, port: u16) -> Result<()> {
        self.stop();
        self.port = port;
        self.spawn().await
    }

    /// Kills the server as a crash would (SIGKILL: no shutdown checkpoint, clients cut off).
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            super::stop_child(&mut child, nix::sys::signal::Signal::SIGKILL, Duration::from_secs(15));
        }
    }
}
