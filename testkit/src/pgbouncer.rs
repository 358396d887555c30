//! A throwaway PgBouncer in front of a throwaway cluster, for the tests of what works behind a
//! connection pooler (dispatcher/tests/poolers.rs). Config and log in a temporary directory,
//! stopped on drop.
use std::{
    net::TcpStream,
    os::unix::process::CommandExt,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use nix::{
    sys::signal::Signal,
    unistd::{User, chown},
};

use highwater::{
    Error, Result,
    embedded::{free_port, stop_child},
};

/// PgBouncer's `pool_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    Session,
    Transaction,
}

pub struct PgBouncer {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

fn binary() -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("pgbouncer"))
        .find(|p| p.is_file());
    on_path.ok_or_else(|| {
        Error::config("pgbouncer not found (PATH, /usr/sbin)")
            .with_fix("install Debian's pgbouncer package: `apt-get install -y pgbouncer` (.ci/run does)")
    })
}

impl PgBouncer {
    /// Starts PgBouncer on a free loopback port, every database forwarded to `127.0.0.1:pg_port`,
    /// trust authentication for the user `postgres`. As root it runs as `postgres` (or `nobody`):
    /// PgBouncer refuses to run as root.
    pub fn start(pg_port: u16, mode: PoolMode, pool_size: u32) -> Result<Self> {
        let bin = binary()?;
        let dir = tempfile::Builder::new().prefix("highwater-pgbouncer-").tempdir().map_err(Error::io("tempdir"))?;
        let port = free_port()?;
        let mode = match mode {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        };
        let root = dir.path();
        let ini = format!(
            "[databases]\n* = host=127.0.0.1 port={pg_port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
             unix_socket_dir =\nauth_type = trust\nauth_file = {auth}\npool_mode = {mode}\ndefault_pool_size = {pool_size}\n\
             max_client_conn = 500\nignore_startup_parameters = extra_float_digits,options\nlogfile = {log}\n",
            auth = root.join("userlist.txt").display(),
            log = root.join("pgbouncer.log").display(),
        );
        std::fs::write(root.join("pgbouncer.ini"), ini).map_err(Error::io("writing pgbouncer.ini"))?;
        std::fs::write(root.join("userlist.txt"), "\"postgres\" \"\"\n").map_err(Error::io("writing userlist.txt"))?;
        let mut cmd = Command::new(bin);
        cmd.arg(root.join("pgbouncer.ini"))
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(root.join("stderr.log")).map_err(Error::io("creating stderr.log"))?);
        if nix::unistd::geteuid().is_root() {
            let user = ["postgres", "nobody"]
                .iter()
                .find_map(|n| User::from_name(n).ok().flatten())
                .ok_or_else(|| Error::Embedded("running as root and no `postgres` or `nobody` user".into()))?;
            for p in
                [root.to_path_buf(), root.join("pgbouncer.ini"), root.join("userlist.txt"), root.join("stderr.log")]
            {
                chown(&p, Some(user.uid), Some(user.gid)).map_err(|e| Error::Embedded(format!("chown: {e}")))?;
            }
            cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        cmd.process_group(0);
        let child = cmd.spawn().map_err(Error::io("starting pgbouncer"))?;
        let mut b = PgBouncer { dir, port, child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = b.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                b.child = None;
                return Err(Error::Embedded(format!("pgbouncer exited ({status}) while starting:\n{}", b.log())));
            }
            if Instant::now() > deadline {
                return Err(Error::Embedded(format!("pgbouncer did not listen within 20s:\n{}", b.log())));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(b)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `database` through the pooler, as `postgres`.
    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn log(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        format!("{}{}", read("pgbouncer.log"), read("stderr.log"))
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop_child(&mut c, Signal::SIGINT, Duration::from_secs(5));
        }
    }
}
