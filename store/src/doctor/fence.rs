//! What holds the fence back now. Delivery stops below the oldest transaction that holds a
//! transaction id (`pg_snapshot_xmin`): a long one delays every consumer, so doctor names it.
use std::time::Duration;

use sqlx::PgPool;

use super::Finding;

/// The oldest transaction holding an id: pid, application, state, xid age, seconds, statement.
/// The start time is NULL for another role's session unless this role has `pg_read_all_stats`.
type Holder = (i32, String, String, i32, Option<f64>, String);

/// A transaction older than `long` holding the fence is a warning.
pub async fn check(pool: &PgPool, long: Duration) -> Vec<Finding> {
    let long_secs = long.as_secs_f64();
    let oldest: Result<Option<Holder>, _> = sqlx::query_as(
        "SELECT pid, coalesce(nullif(application_name, ''), '-'), coalesce(state, '?'), age(backend_xid),
                extract(epoch FROM now() - xact_start)::float8,
                left(regexp_replace(coalesce(query, ''), '\\s+', ' ', 'g'), 160)
           FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
          ORDER BY age(backend_xid) DESC LIMIT 1",
    )
    .fetch_optional(pool)
    .await;
    let prepared: Result<Option<(String, f64)>, _> = sqlx::query_as(
        "SELECT gid, extract(epoch FROM now() - prepared)::float8 FROM pg_prepared_xacts ORDER BY prepared LIMIT 1",
    )
    .fetch_optional(pool)
    .await;
    let mut out = Vec::new();
    match oldest {
        Err(e) => {
            out.push(Finding::warning("fence", format!("cannot read pg_stat_activity: {e}"), "grant pg_read_all_stats"))
        }
        Ok(None) => out.push(Finding::ok("fence", "no running transaction holds the fence back")),
        Ok(Some((pid, _, _, xid_age, None, _))) => out.push(Finding::warning(
            "fence",
            format!(
                "the fence is held by pid {pid} (xid age {xid_age}), another role's session: this role cannot see \
                 how long it has been open, nor what it runs"
            ),
            "GRANT pg_read_all_stats TO this role (`highwater roles --print` does; the fence-age metric needs it too)",
        )),
        Ok(Some((pid, app, state, xid_age, Some(secs), query))) => {
            let hidden = query.contains("insufficient privilege");
            let what = format!(
                "the fence is held by pid {pid} ({app}, {state}, in a transaction for {secs:.1} s, xid age {xid_age}){}",
                if hidden { String::new() } else { format!(": {query}") }
            );
            if secs > long_secs {
                out.push(Finding::warning(
                    "fence",
                    format!("{what}: no consumer delivers events committed after it began until it ends"),
                    format!("end that transaction (SELECT pg_terminate_backend({pid})) or make it shorter"),
                ));
            } else {
                out.push(Finding::ok("fence", what));
            }
            if hidden {
                out.push(Finding::warning(
                    "fence",
                    "this role cannot see other roles' statements in pg_stat_activity",
                    "GRANT pg_read_all_stats TO the dispatcher's role (its fence-age metric needs it too)",
                ));
            }
        }
    }
    match prepared {
        Ok(Some((gid, secs))) if secs > long_secs => out.push(Finding::warning(
            "fence",
            format!("prepared transaction {gid:?} has been open for {secs:.0} s and holds the fence"),
            format!("COMMIT PREPARED '{gid}' or ROLLBACK PREPARED '{gid}'"),
        )),
        _ => {}
    }
    out
}
