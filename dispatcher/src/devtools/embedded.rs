//! A throwaway PostgreSQL cluster from the machine's server binaries: the quickstart's database.
//! Its data directory is a temporary directory removed on drop. The tests' harness
//! (`highwater-testkit`: a shared cluster, replicas, transaction-id boundaries) builds on the
//! lifecycle steps public here: [`EmbeddedPostgres::prepare`], [`initdb`], [`run`].
//!
//! [`initdb`]: EmbeddedPostgres::initdb
//! [`run`]: EmbeddedPostgres::run
use std::{
    fs::File,
    net::TcpListener,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::{Pid, User, chown},
};

use crate::{Error, Result};

/// Server settings; the defaults favour speed because the cluster is thrown away.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    pub settings: Vec<(String, String)>,
    /// A fixed port instead of a free one.
    pub port: Option<u16>,
    /// These server binaries instead of [`find_bindir`]'s: for a test that needs one major
    /// whatever `$HIGHWATER_PG_BINDIR` says (the refusal of PostgreSQL 13).
    pub bindir: Option<PathBuf>,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            settings: vec![
                ("fsync".into(), "off".into()),
                ("synchronous_commit".into(), "off".into()),
                ("full_page_writes".into(), "off".into()),
                ("max_connections".into(), "200".into()),
            ],
            port: None,
            bindir: None,
        }
    }
}

pub struct EmbeddedPostgres {
    dir: Option<tempfile::TempDir>,
    bindir: PathBuf,
    port: u16,
    run_as: Option<User>,
    child: Option<Child>,
    settings: Vec<(String, String)>,
}

fn has_server(p: &Path) -> bool {
    p.join("initdb").is_file() && p.join("postgres").is_file()
}

/// The server binaries: `$HIGHWATER_PG_BINDIR`, then `pg_config --bindir`, then the newest
/// `/usr/lib/postgresql/*/bin`.
pub fn find_bindir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("HIGHWATER_PG_BINDIR") {
        let p = PathBuf::from(&dir);
        if has_server(&p) {
            return Ok(p);
        }
        // Set but wrong: falling back to another major would run the version matrix on the
        // machine's default server and report it green.
        return Err(Error::config(format!("HIGHWATER_PG_BINDIR={dir} has no initdb and postgres")).with_fix(
            "point it at a PostgreSQL bin directory (e2e/pg/majors.sh bindir MAJOR prints one), or unset it",
        ));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_server(&p) {
            return Ok(p);
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let p = e.path().join("bin");
            has_server(&p).then_some((v, p))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p).ok_or_else(|| {
        Error::config("PostgreSQL server binaries (initdb, postgres) not found").with_fix(
            "install them (`apt-get install postgresql-15`), set HIGHWATER_PG_BINDIR, or set DATABASE_URL to \
             use an existing server",
        )
    })
}

/// Sends `signal`, waits up to `grace` for the child to exit, then kills it; returns how it
/// exited.
pub fn stop_child(child: &mut Child, signal: Signal, grace: Duration) -> Option<std::process::ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    let _ = kill(Pid::from_raw(child.id() as i32), signal);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().ok()
}

/// A port nobody listens on right now.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(Error::io("binding a free port"))?;
    Ok(l.local_addr().map_err(Error::io("reading the bound port"))?.port())
}

impl EmbeddedPostgres {
    /// initdb into a new temporary directory, then start the server on a free loopback port.
    /// As root, both run as the `postgres` (or `nobody`) user: PostgreSQL refuses to run as root.
    pub async fn start(options: EmbeddedOptions) -> Result<Self> {
        let mut pg = Self::prepare(options)?;
        pg.initdb()?;
        pg.run().await?;
        Ok(pg)
    }

    /// The first step of [`start`](Self::start): a new temporary directory owned by the user the
    /// server will run as, its port chosen, no cluster in it yet. The next steps are [`initdb`]
    /// (or another way to fill [`data_dir`], as a base backup) and [`run`].
    ///
    /// [`initdb`]: Self::initdb
    /// [`data_dir`]: Self::data_dir
    /// [`run`]: Self::run
    pub fn prepare(options: EmbeddedOptions) -> Result<Self> {
        let bindir = match options.bindir {
            Some(dir) if has_server(&dir) => dir,
            Some(dir) => return Err(Error::Embedded(format!("{} has no initdb and postgres", dir.display()))),
            None => find_bindir()?,
        };
        let dir = tempfile::Builder::new()
            .prefix("highwater-pg-")
            .tempdir()
            .map_err(Error::io("creating the data directory"))?;
        let run_as = if nix::unistd::geteuid().is_root() {
            let user =
                ["postgres", "nobody"].iter().find_map(|n| User::from_name(n).ok().flatten()).ok_or_else(|| {
                    Error::Embedded(
                        "running as root and no `postgres` or `nobody` user exists to run PostgreSQL as".into(),
                    )
                })?;
            chown(dir.path(), Some(user.uid), Some(user.gid))
                .map_err(|e| Error::Embedded(format!("chown of {}: {e}", dir.path().display())))?;
            Some(user)
        } else {
            None
        };
        let port = match options.port {
            Some(p) => p,
            None => free_port()?,
        };
        Ok(EmbeddedPostgres { dir: Some(dir), bindir, port, run_as, child: None, settings: options.settings })
    }

    /// The cluster's data directory (`data` in [`root`](Self::root)).
    pub fn data_dir(&self) -> PathBuf {
        self.root().join("data")
    }

    /// The temporary directory that holds the data directory and `postgres.log`; removed on drop.
    pub fn root(&self) -> &Path {
        self.dir.as_ref().expect("data directory present until drop").path()
    }

    /// The user the server runs as when this process is root (PostgreSQL refuses root); files
    /// written into the data directory must be given to it.
    pub fn owner(&self) -> Option<&User> {
        self.run_as.as_ref()
    }

    /// One of the server's programs (`pg_resetwal`, `pg_basebackup`, …), run in [`root`] as
    /// [`owner`].
    ///
    /// [`root`]: Self::root
    /// [`owner`]: Self::owner
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bindir.join(program));
        c.current_dir(self.root()).env_remove("PGDATA");
        if let Some(u) = &self.run_as {
            c.uid(u.uid.as_raw()).gid(u.gid.as_raw());
        }
        c
    }

    /// Runs a server program on the data directory (its last argument); fails with its stderr.
    fn run_on_data_dir(&self, program: &str, args: &[&str]) -> Result<()> {
        let out = self
            .command(program)
            .args(args)
            .arg(self.data_dir())
            .output()
            .map_err(Error::io(format!("running {program}")))?;
        if !out.status.success() {
            return Err(Error::Embedded(format!("{program} failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        Ok(())
    }

    /// Creates the cluster in [`data_dir`](Self::data_dir) (superuser `postgres`, trust).
    pub fn initdb(&self) -> Result<()> {
        // No --no-instructions (14's): the output is captured anyway, and 13 must start, to be
        // refused by the tests of the version check.
        self.run_on_data_dir(
            "initdb",
            &["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "-D"],
        )
    }

    /// Starts the server on [`port`](Self::port) and waits until it accepts connections.
    pub async fn run(&mut self) -> Result<()> {
        let log_path = self.root().join("postgres.log");
        let log = File::create(&log_path).map_err(Error::io("creating postgres.log"))?;
        if let Some(u) = &self.run_as {
            let _ = chown(&log_path, Some(u.uid), Some(u.gid));
        }
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(Error::io("log"))?)
            .stderr(log);
        for (k, v) in &self.settings {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        // Its own process group, so a Ctrl-C aimed at the quickstart reaches us, not the server.
        cmd.process_group(0);
        self.child = Some(cmd.spawn().map_err(Error::io("starting postgres"))?);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(Error::Embedded(format!("postgres exited ({status}) while starting:\n{log}")));
            }
            if sqlx::PgPool::connect(&self.url()).await.map(|p| tokio::spawn(async move { p.close().await })).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Embedded(format!(
                    "postgres did not accept connections within 60s; log at {}",
                    log_path.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port the next [`run`](Self::run) listens on.
    pub fn set_port(&mut self, port: u16) {
        self.port = port;
    }

    /// The server binaries' directory.
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// The settings the server runs with (`-c name=value`).
    pub fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    /// The postmaster's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// URL of the `postgres` database as the superuser `postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a database and returns its URL.
    pub async fn create_database(&self, name: &str) -> Result<String> {
        let pool = sqlx::PgPool::connect(&self.url()).await?;
        highwater_store::db::create_database(&pool, name).await?;
        pool.close().await;
        Ok(self.url_for(name))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root().join("postgres.log")).unwrap_or_default()
    }

    /// Stops the server (fast shutdown: open transactions are rolled back) and waits for it.
    pub fn stop(&mut self) {
        self.stop_with(Signal::SIGINT);
    }

    /// Stops the server with `signal` (SIGINT fast, SIGQUIT immediate, SIGKILL as a crash would),
    /// killing it if it has not exited within 15 s.
    pub fn stop_with(&mut self, signal: Signal) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, signal, Duration::from_secs(15));
        }
    }

    /// Stops and starts the server on the same port and data directory.
    pub async fn restart(&mut self) -> Result<()> {
        self.stop();
        self.run().await
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}
