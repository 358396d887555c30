//! highwater-testkit: the throwaway PostgreSQL harness of highwater's tests and benchmarks. A
//! dev-dependency (and the e2e harness's dependency), never a dependency of a product crate: the
//! product keeps only the quickstart's embedded PostgreSQL ([`highwater::embedded`]), which
//! this crate builds on.
//!
//! - [`shared_db`]: a database of its own for each test, on one cluster per test binary, cloned
//!   from a template that was migrated once; the cluster stops with the process ([`watchdog`]);
//! - [`start_at`] and [`burn_xids_to`]: a cluster whose transaction counter starts, or stands,
//!   where a long-lived database would (a power of ten, the 32-bit epoch);
//! - [`TestCluster`]: replicas (a hot standby, promotion, a crash) and password logins;
//! - [`pgbouncer`]: a throwaway PgBouncer in front of a cluster.

pub mod pgbouncer;
mod replica;
mod shared;
pub mod watchdog;
mod xids;

use highwater::{Result, embedded::EmbeddedPostgres};

pub use shared::{SharedDb, shared_cluster, shared_db};
pub use xids::{burn_xids_to, start_at};

/// What tests do to an embedded cluster beyond what the quickstart needs.
#[allow(async_fn_in_trait)]
pub trait TestCluster: Sized {
    /// A hot standby of this server on a free port: `pg_basebackup -R` (it writes
    /// `standby.signal` and `primary_conninfo`), then started. Read-only until promoted.
    async fn start_standby(&self) -> Result<EmbeddedPostgres>;

    /// Promotes a standby and waits until it accepts writes.
    async fn promote(&self) -> Result<()>;

    /// Stops the server and starts it on `port` (the address a failed primary had).
    async fn restart_on(&mut self, port: u16) -> Result<()>;

    /// Kills the server as a crash would (SIGKILL: no shutdown checkpoint, clients cut off).
    fn crash(&mut self);

    /// A superuser `role` that must log in over TCP with `password` (scram-sha-256; every other
    /// role keeps trust), and the URL that does. For tests of how passwords are handled.
    async fn create_password_login(&self, role: &str, password: &str) -> Result<String>;
}
