//! A throwaway PostgreSQL cluster from the machine's server binaries: the quickstart's database
//! and the test harness's. Its data directory is a temporary directory removed on drop.
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

mod replica;

/// Server settings; the defaults favour speed because the cluster is thrown away.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    pub settings: Vec<(String, String)>,
    /// A fixed port instead of a free one.
    pub port: Option<u16>,
    /// Start the cluster's transaction counter here (an `xid8`: epoch in the high 32 bits)
    /// instead of just after initdb's, so tests can cross the boundaries a long-lived database
    /// crosses: a power of ten, and the 32-bit epoch. Set with `pg_resetwal -x/-e`.
    pub next_xid: Option<u64>,
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
            next_xid: None,
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
        let mut pg =
            EmbeddedPostgres { dir: Some(dir), bindir, port: 0, run_as, child: None, settings: options.settings };
        pg.initdb()?;
        if let Some(xid) = options.next_xid {
            pg.reset_next_xid(xid)?;
        }
        pg.port = match options.port {
            Some(p) => p,
            None => free_port()?,
        };
        pg.spawn().await?;
        Ok(pg)
    }

    fn data_dir(&self) -> PathBuf {
        self.root().join("data")
    }

    fn root(&self) -> &Path {
        self.dir.as_ref().expect("data directory present until drop").path()
    }

    fn command(&self, program: &str) -> Command {
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

    fn initdb(&self) -> Result<()> {
        // No --no-instructions (14's): the output is captured anyway, and 13 must start, to be
        // refused by the tests of the version check.
        self.run_on_data_dir(
            "initdb",
            &["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "-D"],
        )
    }

    /// `pg_resetwal -x/-e` on the stopped cluster. The commit-log segment that holds the new id
    /// must exist before the server starts (as pg_resetwal's manual says), so it is created
    /// zero-filled: no transaction in it has committed yet.
    fn reset_next_xid(&self, next: u64) -> Result<()> {
        let (epoch, xid) = ((next >> 32) as u32, next as u32);
        if xid < 3 {
            return Err(Error::Embedded(format!(
                "next_xid {next}: its low 32 bits must be at least 3 (ids 0-2 are reserved)"
            )));
        }
        // initdb creates the `postgres` database after freezing template1: rows with ordinary
        // xmins that a counter moved 2^31 ahead would read as written in the future (invisible).
        // Freeze them first, in single-user mode.
        let mut single = self
            .command("postgres")
            .args(["--single", "-D"])
            .arg(self.data_dir())
            .arg("postgres")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::io("starting postgres --single"))?;
        std::io::Write::write_all(single.stdin.as_mut().expect("piped stdin"), b"VACUUM FREEZE;\n")
            .map_err(Error::io("writing to postgres --single"))?;
        drop(single.stdin.take());
        let out = single.wait_with_output().map_err(Error::io("running postgres --single"))?;
        if !out.status.success() {
            return Err(Error::Embedded(format!("VACUUM FREEZE failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        // 32 pages of 8 kB, two status bits a transaction: 1,048,576 transactions a segment.
        const XACTS_PER_SEGMENT: u32 = 32 * 8192 * 4;
        let segment = self.data_dir().join("pg_xact").join(format!("{:04X}", xid / XACTS_PER_SEGMENT));
        if !segment.exists() {
            std::fs::write(&segment, vec![0u8; 32 * 8192]).map_err(Error::io("creating a pg_xact segment"))?;
            if let Some(u) = &self.run_as {
                let _ = chown(&segment, Some(u.uid), Some(u.gid));
            }
        } else {
            // initdb writes only the pages it used (the first of segment 0): an id further into
            // the segment needs its page there too, zero-filled likewise.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&segment)
                .map_err(Error::io("opening a pg_xact segment"))?;
            let len = f.metadata().map_err(Error::io("reading a pg_xact segment"))?.len();
            if len < 32 * 8192 {
                f.set_len(32 * 8192).map_err(Error::io("extending a pg_xact segment"))?;
            }
        }
        self.run_on_data_dir("pg_resetwal", &["-x", &xid.to_string(), "-e", &epoch.to_string(), "-D"])
    }

    async fn spawn(&mut self) -> Result<()> {
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
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""))))
            .execute(&pool)
            .await?;
        pool.close().await;
        Ok(self.url_for(name))
    }

    /// A superuser `role` that must log in over TCP with `password` (scram-sha-256; every other
    /// role keeps trust), and the URL that does. For tests of how passwords are handled.
    pub async fn create_password_login(&self, role: &str, password: &str) -> Result<String> {
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
        Ok(format!("postgres://{role}:{password}@127.0.0.1:{}/postgres", self.port))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root().join("postgres.log")).unwrap_or_default()
    }

    /// Stops the server (fast shutdown: open transactions are rolled back) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, Signal::SIGINT, Duration::from_secs(15));
        }
    }

    /// Stops and starts the server on the same port and data directory.
    pub async fn restart(&mut self) -> Result<()> {
        self.stop();
        self.spawn().await
    }
}

/// Uses up transaction ids until the next one assigned is at least `target` (an `xid8`), so a
/// test can stand just below a boundary after its setup. One server-side loop, a commit each.
pub async fn burn_xids_to(pool: &sqlx::PgPool, target: u64) -> Result<()> {
    let next: crate::Xid8 =
        sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())").fetch_one(pool).await?;
    if next.0 >= target {
        return Ok(());
    }
    let n = target - next.0;
    // The simple protocol: a DO block may commit only outside a transaction block.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
    )))
    .execute(pool)
    .await?;
    Ok(())
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}
