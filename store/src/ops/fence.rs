//! Who holds the fence back now. Delivery stops below the oldest running transaction that holds
//! a transaction id, anywhere in the cluster: while committed events wait above it, `consumer
//! status` and `consumer list` name it and the dispatcher logs it, so that lag growing with no
//! failure has its cause where the user looks (issue 44).
use serde::Serialize;
use sqlx::PgPool;

use crate::{Result, Xid8};

/// The transaction whose id is the fence while committed events wait above it: a session, or a
/// prepared transaction (no session, no pid).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct FenceHolder {
    /// The fence: this transaction's id.
    pub xid: Xid8,
    pub pid: Option<i32>,
    pub application: Option<String>,
    /// `active`, `idle in transaction`, ...; `None` for another role's session unless this role
    /// has `pg_read_all_stats`.
    pub state: Option<String>,
    pub database: Option<String>,
    /// Seconds since the transaction began; `None` where the role cannot see it.
    pub seconds: Option<f64>,
    /// The gid of a prepared transaction.
    pub prepared: Option<String>,
}

impl std::fmt::Display for FenceHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let age = self.seconds.map(|s| format!("{s:.0} s"));
        if let Some(gid) = &self.prepared {
            return write!(f, "prepared transaction {gid:?} ({})", age.as_deref().unwrap_or("age unknown"));
        }
        let pid = self.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
        let app = self.application.as_deref().unwrap_or("no application name");
        match (&self.state, age) {
            (Some(state), Some(age)) => write!(f, "pid {pid} ({app}, {state} {age})"),
            // Another role's session, seen without pg_read_all_stats.
            _ => write!(f, "pid {pid} ({app}, another role's session: grant pg_read_all_stats to see more)"),
        }
    }
}

impl FenceHolder {
    /// How to end it.
    pub fn fix(&self) -> String {
        match (&self.prepared, self.pid) {
            (Some(gid), _) => format!("COMMIT PREPARED '{gid}' or ROLLBACK PREPARED '{gid}'"),
            (None, Some(pid)) => format!(
                "commit or roll back that transaction, or end it: SELECT pg_terminate_backend({pid}); \
                 `highwater doctor` shows what it runs"
            ),
            (None, None) => "commit or roll back that transaction".to_owned(),
        }
    }
}

/// The fence's holder, if committed events wait above it (at most one row: one transaction has
/// the fence's id). A holder with nothing committed after it holds nothing back, so is not named.
/// Other roles' sessions show their state and age only with `pg_read_all_stats`.
pub async fn holder(pool: &PgPool) -> Result<Option<FenceHolder>> {
    Ok(sqlx::query_as(concat!(
        "WITH f AS MATERIALIZED (SELECT ",
        fence!(),
        " AS fence),
              -- In order, the index stops at the first row at or above the fence (as the head read).
              waiting AS (SELECT f.fence FROM f
                           WHERE (SELECT tx_id FROM highwater.events WHERE tx_id >= f.fence
                                   ORDER BY tx_id LIMIT 1) IS NOT NULL)
         SELECT w.fence AS xid, a.pid, nullif(a.application_name, '') AS application, a.state,
                a.datname::text AS database, extract(epoch FROM now() - a.xact_start)::float8 AS seconds,
                NULL::text AS prepared
           FROM waiting w JOIN pg_stat_activity a ON a.backend_xid = xid(w.fence)
         UNION ALL
         SELECT w.fence, NULL, NULL, NULL, p.database::text, extract(epoch FROM now() - p.prepared)::float8, p.gid
           FROM waiting w JOIN pg_prepared_xacts p ON p.transaction = xid(w.fence)
         LIMIT 1"
    ))
    .fetch_optional(pool)
    .await?)
}
