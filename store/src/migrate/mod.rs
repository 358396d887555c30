//! `highwater migrate`: the ordered migrations (tables and data, `migrations/`), then the current
//! definition of every function, trigger and view (`migrations/definitions/`), in ONE transaction
//! that waits behind application writers instead of deadlocking them.
//!
//! Why not sqlx's `Migrator::run`: it runs each migration in a transaction of its own, so a
//! writer resolving `highwater.events` between two of them could hold a lock one migration left
//! while the next waited for another (the `deadlock detected` of issue 34); it cannot wait with a
//! `lock_timeout` and retry; and it refuses a migration whose released text has since been
//! rewritten. The bookkeeping stays sqlx's table (`highwater._sqlx_migrations`), so binaries of
//! earlier releases still see the schema as migrated.
mod apply;
mod blockers;
mod checksums;
pub mod definitions;
mod plan;
pub mod server_version;
pub mod window;

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use sqlx::PgPool;

pub use plan::{Plan, Step};

use crate::{Error, Result};

/// How `migrate` waits for locks.
#[derive(Debug, Clone)]
pub struct Options {
    /// The longest one lock request waits (`SET LOCAL lock_timeout`): also the longest an
    /// application write queues behind a migration that is waiting for its locks. Kept below
    /// PostgreSQL's `deadlock_timeout` (1 s by default), so that in a lock cycle with a writer the
    /// migration gives up first and the writer's transaction never sees `deadlock detected`.
    pub lock_timeout: Duration,
    /// Retries with backoff until this much time has passed, then fails naming the holders.
    pub give_up_after: Duration,
    /// Applies a breaking step although dispatchers older than it are alive.
    pub force: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { lock_timeout: Duration::from_millis(500), give_up_after: Duration::from_secs(600), force: false }
    }
}

/// What one `migrate` did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Versions applied, in order.
    pub applied: Vec<i64>,
    /// Versions whose recorded checksum was a released text since rewritten: recorded anew.
    pub rewritten: Vec<i64>,
    /// Whether the definitions were (re)applied: only when a migration ran or one changed.
    pub definitions_applied: bool,
    /// Attempts that gave up on a lock and were retried.
    pub retries: u32,
    /// The time of the attempt that committed.
    pub duration: Duration,
    /// For each attempt that gave way, the transactions that held its locks (relation, pid,
    /// application, state, time in transaction, statement), as sampled while it waited.
    pub gave_way_to: Vec<String>,
}

/// Migrates with this release's plan.
pub async fn run(pool: &PgPool, opts: &Options) -> Result<Report> {
    run_plan(pool, &Plan::this_release(), opts).await
}

/// Migrates with `plan` (tests add steps to it), retrying the whole transaction when a lock
/// could not be had within `lock_timeout`.
pub async fn run_plan(pool: &PgPool, plan: &Plan, opts: &Options) -> Result<Report> {
    // Before the first write (the schema itself is created inside the attempt): an unsupported
    // server would otherwise fail half-way through the plan on a missing operator or aggregate.
    server_version::check(pool).await?;
    let mut retries = 0u32;
    let holders = std::sync::Mutex::new(Vec::new());
    let attempt = || async {
        let started = std::time::Instant::now();
        let mut report = apply::once(pool, plan, opts, &holders).await?;
        report.duration = started.elapsed();
        Ok::<_, Error>(report)
    };
    let mut report = attempt
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(5))
                .with_total_delay(Some(opts.give_up_after))
                .without_max_times()
                .with_jitter(),
        )
        .when(is_lock_conflict)
        .notify(|e, wait| {
            retries += 1;
            tracing::warn!(
                attempt = retries,
                retry_in = ?wait,
                error = %e,
                "migration gave way to running transactions (a lock was not free within lock_timeout); \
                 nothing was changed, retrying"
            );
        })
        .await
        .map_err(|e| {
            if is_lock_conflict(&e) {
                Error::refused(format!(
                    "migration could not take its locks within {:?} (each wait at most {:?}): {e}",
                    opts.give_up_after, opts.lock_timeout
                ))
                .with_fix(
                    "find the long transaction holding highwater tables (SELECT pid, xact_start, state, query FROM \
                     pg_stat_activity WHERE xact_start < now() - interval '1 minute'), end it, and run migrate again",
                )
            } else {
                e
            }
        })?;
    report.retries = retries;
    report.gave_way_to = holders.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(report)
}

/// A lock not had within `lock_timeout`, the lock prelude's time cap (a statement timeout), or
/// a deadlock the migration was chosen to break: nothing was changed, the attempt can be retried.
fn is_lock_conflict(e: &Error) -> bool {
    let code = match e {
        Error::Database(d) => d.as_database_error().and_then(|d| d.code().map(|c| c.into_owned())),
        _ => None,
    };
    matches!(code.as_deref(), Some("55P03" | "40P01" | "57014"))
}
