//! Refusing a transaction-mode connection pooler (docs/operations.md, "Behind a connection
//! pooler"). The Shared claim is a session advisory lock and wakeups are LISTEN: neither survives
//! a pooler that hands each transaction to whichever server connection is free (PgBouncer
//! `pool_mode = transaction`, Supavisor's port 6543, Neon's `-pooler` endpoint, a CloudNativePG
//! Pooler in `poolMode: transaction`). Every binary checks this at start, before the server
//! version, so it fails with the problem and the fix instead of `prepared statement "sqlx_s_1"
//! already exists`, or worse, with two instances holding one claim.
use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool, Row};

use crate::{Error, Result};

/// The refusal, also returned for the prepared-statement errors a transaction pooler causes.
pub fn refusal() -> Error {
    Error::refused(
        "the database URL goes through a transaction-mode connection pooler (session advisory locks and LISTEN do \
         not survive it); nothing was changed",
    )
    .with_fix(
        "point DATABASE_URL at PostgreSQL directly or at a session-mode pool (PgBouncer pool_mode=session, \
         Supavisor port 5432, CloudNativePG Pooler poolMode: session, Neon's endpoint without -pooler); \
         applications may stay on the transaction pool",
    )
}

/// Whether `e` is what sqlx's named prepared statements meet behind a transaction pooler:
/// `prepared statement "sqlx_s_N" already exists` (42P05) or `... does not exist` (26000).
pub fn is_pooler_symptom(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("42P05") | Some("26000")))
}

/// Maps the pooler's prepared-statement errors to [`refusal`].
pub fn diagnose(e: Error) -> Error {
    match &e {
        Error::Database(d) if is_pooler_symptom(d) => refusal(),
        _ => e,
    }
}

/// Refuses a URL whose session state does not survive from one transaction to the next.
///
/// Two fresh connections, simple-protocol statements only (no prepared statement to collide):
/// A records its backend and sets a session-level marker; B opens a transaction and reads its
/// backend; A reads its backend and the marker again while B's transaction is open. Directly or
/// through a session pool, A keeps its backend and the marker and B has another one. Through a
/// transaction pool A's backend is free between its transactions: B is handed A's backend
/// (PgBouncer reuses the last one freed) or A gets another one without the marker.
pub async fn check(pool: &PgPool) -> Result<()> {
    let opts = pool.connect_options();
    let mut a = PgConnection::connect_with(&opts).await?;
    let mut b = PgConnection::connect_with(&opts).await?;
    let outcome = probe(&mut a, &mut b).await;
    let _ = b.close().await;
    let _ = a.close().await;
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) => Err(refusal()),
        Err(e) => Err(diagnose(e)),
    }
}

/// True when session state survived.
async fn probe(a: &mut PgConnection, b: &mut PgConnection) -> Result<bool> {
    let row = sqlx::raw_sql(
        "SELECT pg_backend_pid()::text AS pid, set_config('highwater.pooler_probe', 'kept', false) AS marker",
    )
    .fetch_one(&mut *a)
    .await?;
    let pid_a: String = row.try_get("pid")?;
    sqlx::raw_sql("BEGIN").execute(&mut *b).await?;
    let pid_b: String =
        sqlx::raw_sql("SELECT pg_backend_pid()::text AS pid").fetch_one(&mut *b).await?.try_get("pid")?;
    if pid_b == pid_a {
        return Ok(false);
    }
    let again = tokio::time::timeout(
        Duration::from_secs(10),
        sqlx::raw_sql(
            "SELECT pg_backend_pid()::text AS pid, coalesce(current_setting('highwater.pooler_probe', true), '') AS marker",
        )
        .fetch_one(&mut *a),
    )
    .await;
    sqlx::raw_sql("ROLLBACK").execute(&mut *b).await?;
    match again {
        Ok(row) => {
            let row = row?;
            let (pid, marker): (String, String) = (row.try_get("pid")?, row.try_get("marker")?);
            Ok(pid == pid_a && marker == "kept")
        }
        // A waited for a free server connection: a pool of one that B holds. Only a pooler
        // makes a connection wait for another's transaction (10 s: a slow server is not one).
        Err(_) => Ok(false),
    }
}
