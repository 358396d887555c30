//! Connecting, migrating and checking the schema.
use std::{str::FromStr, time::Duration};

use backon::{BackoffBuilder, ExponentialBuilder};
use sqlx::{
    ConnectOptions, Connection, PgConnection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use crate::{Error, Result};

/// `user@host:port/database`, never the password.
pub fn describe_target(url: &str) -> String {
    match PgConnectOptions::from_str(url) {
        Ok(o) => format!("{}@{}:{}/{}", o.get_username(), o.get_host(), o.get_port(), o.get_database().unwrap_or("")),
        Err(_) => "<unparseable DATABASE_URL>".to_owned(),
    }
}

fn options(url: &str) -> Result<PgConnectOptions> {
    let opts = PgConnectOptions::from_str(url).map_err(|e| {
        Error::config(format!("the database URL is not valid ({e})"))
            .with_fix("use postgres://USER:PASSWORD@HOST:PORT/DATABASE")
    })?;
    Ok(opts
        .application_name("highwater")
        .log_statements(tracing::log::LevelFilter::Trace)
        .log_slow_statements(tracing::log::LevelFilter::Debug, Duration::from_secs(5)))
}

/// A pool, connected once to prove the database is there. Short acquire timeout: for commands
/// a person waits on; the dispatcher uses [`connect_with_retry`].
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool> {
    connect_with(url, max_connections, Duration::from_secs(5)).await
}

async fn connect_with(url: &str, max_connections: u32, acquire_timeout: Duration) -> Result<PgPool> {
    let opts = options(url)?;
    // One direct connection first: the pool would retry a refused login or a missing database
    // inside its acquire timeout and report only "pool timed out".
    match tokio::time::timeout(acquire_timeout, PgConnection::connect_with(&opts)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
        }
        Ok(Err(source)) => return Err(super::reach::explain(url, source)),
        Err(_) => return Err(Error::Unreachable { target: describe_target(url), source: sqlx::Error::PoolTimedOut }),
    }
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(acquire_timeout)
        .connect_with(opts)
        .await
        .map_err(|source| Error::Unreachable { target: describe_target(url), source })
}

/// Like [`connect`], retrying with exponential backoff until `give_up_after` has passed, so a
/// process started before its database comes up on its own.
pub async fn connect_with_retry(url: &str, max_connections: u32, give_up_after: Duration) -> Result<PgPool> {
    let pool = lazy_pool(url, max_connections)?;
    wait_reachable(&pool, url, give_up_after).await?;
    Ok(pool)
}

/// A pool that connects on first use. Connections are held for a whole pass, so under load a
/// pass may queue for one: its acquire timeout is patient.
pub fn lazy_pool(url: &str, max_connections: u32) -> Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(60))
        .connect_lazy_with(options(url)?))
}

/// Retries a first connection (5 s each) with exponential backoff until `give_up_after` has
/// passed. The last sleep is cut to the deadline, so the wait is the whole timeout the user set:
/// a total-delay budget alone stops as soon as the next jittered delay would pass it, which gave
/// up after half of a short `--connect-timeout`.
pub async fn wait_reachable(pool: &PgPool, url: &str, give_up_after: Duration) -> Result<()> {
    // One direct connection per try: a refused connection fails at once, where the pool would
    // keep retrying inside its acquire timeout.
    let opts = pool.connect_options();
    let deadline = tokio::time::Instant::now() + give_up_after;
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .with_jitter()
        .build();
    loop {
        let error = match tokio::time::timeout(Duration::from_secs(5), PgConnection::connect_with(&opts)).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                return Ok(());
            }
            Ok(Err(source)) => super::reach::explain(url, source),
            Err(_) => Error::Unreachable { target: describe_target(url), source: sqlx::Error::PoolTimedOut },
        };
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !super::reach::retriable(&error) || remaining.is_zero() {
            return Err(error);
        }
        let wait = delays.next().unwrap_or(Duration::from_secs(5)).min(remaining);
        tracing::warn!(error = %error, retry_in = ?wait, "database not reachable yet");
        tokio::time::sleep(wait).await;
    }
}

/// Whether the database answers a statement now (the dispatcher's `/readyz`).
/// `CREATE DATABASE name` on the server `pool` is connected to (the embedded PostgreSQL's, for the
/// tests' and the quickstart's throwaway databases). A name cannot be a parameter: it is quoted
/// as an identifier, as libpq quotes one.
pub async fn create_database(pool: &PgPool, name: &str) -> Result<()> {
    let statement = format!("CREATE DATABASE {}", postgres_protocol::escape::escape_identifier(name));
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement)).execute(pool).await?;
    Ok(())
}

pub async fn ping(pool: &PgPool) -> Result<()> {
    sqlx::query(PING).execute(pool).await?;
    Ok(())
}

const PING: &str = "SELECT 1";

/// Applies every migration not yet applied and the current definitions, waiting behind running
/// transactions with the default lock timeout ([`crate::migrate::run`] for the options). Safe to
/// run any number of times, concurrently too.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    super::migrate::run(pool, &super::migrate::Options::default()).await?;
    Ok(())
}

/// Refuses to run against a database whose schema is missing, behind this binary, or past the
/// oldest binary it accepts (the compatibility window, [`crate::migrate::window`]).
pub async fn check_migrated(pool: &PgPool, url: &str) -> Result<()> {
    super::migrate::window::check(pool, url).await
}
