//! Streaming replicas of an embedded server, for the tests of what highwater does against a hot
//! standby (refuses at once) and across a failover (the standby promoted and moved to the
//! primary's address, as a DNS name or a Kubernetes Service would move: dispatchers reconnect).
//! Also the password logins of the tests of how credentials are handled.
use highwater::{
    Error, Result,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
};
use nix::sys::signal::Signal;

use crate::TestCluster;

impl TestCluster for EmbeddedPostgres {
    async fn start_standby(&self) -> Result<EmbeddedPostgres> {
        let mut standby = EmbeddedPostgres::prepare(EmbeddedOptions {
            settings: self.settings().to_vec(),
            port: None,
            bindir: Some(self.bindir().to_path_buf()),
        })?;
        let port = self.port().to_string();
        let out = standby
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-X", "stream", "-R", "-c", "fast", "-D"])
            .arg(standby.data_dir())
            .output()
            .map_err(Error::io("running pg_basebackup"))?;
        if !out.status.success() {
            return Err(Error::Embedded(format!("pg_basebackup failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        standby.run().await?;
        Ok(standby)
    }

    async fn promote(&self) -> Result<()> {
        let pool = sqlx::PgPool::connect(&self.url()).await?;
        let promoted: bool = sqlx::query_scalar("SELECT pg_promote(true, 60)").fetch_one(&pool).await?;
        pool.close().await;
        if !promoted {
            return Err(Error::Embedded("pg_promote did not finish within 60 s".into()));
        }
        Ok(())
    }

    async fn restart_on(&mut self, port: u16) -> Result<()> {
        self.stop();
        self.set_port(port);
        self.run().await
    }

    fn crash(&mut self) {
        self.stop_with(Signal::SIGKILL);
    }

    async fn create_password_login(&self, role: &str, password: &str) -> Result<String> {
        // Both go into SQL, pg_hba.conf and the URL verbatim.
        if !role.chars().chain(password.chars()).all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::Internal("create_password_login: role and password must be alphanumeric".into()));
        }
        let pool = sqlx::PgPool::connect(&self.url()).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")))
            .execute(&pool)
            .await?;
        let hba: String = sqlx::query_scalar("SHOW hba_file").fetch_one(&pool).await?;
        let rules = std::fs::read_to_string(&hba).map_err(Error::io("reading pg_hba.conf"))?;
        // pg_hba.conf is first match: the password rule goes before the trust rules.
        std::fs::write(&hba, format!("host all {role} 127.0.0.1/32 scram-sha-256\n{rules}"))
            .map_err(Error::io("writing pg_hba.conf"))?;
        sqlx::query("SELECT pg_reload_conf()").execute(&pool).await?;
        pool.close().await;
        Ok(format!("postgres://{role}:{password}@127.0.0.1:{}/postgres", self.port()))
    }
}
