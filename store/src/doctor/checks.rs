//! The checks of `highwater doctor` but the fence's: the server, the schema's window, the role's
//! privileges, whether LISTEN reaches this session, `wal_level`.
use std::time::Duration;

use sqlx::{PgPool, postgres::PgListener};

use super::{Finding, Level, Role};
use crate::migrate::{server_version as sv, window};

pub async fn server(pool: &PgPool) -> Vec<Finding> {
    let row: Result<(i32, bool), _> =
        sqlx::query_as("SELECT current_setting('server_version_num')::int, pg_is_in_recovery()").fetch_one(pool).await;
    let (num, standby) = match row {
        Ok((n, s)) => (u32::try_from(n).unwrap_or(0), s),
        Err(e) => {
            return vec![Finding::error(
                "server",
                format!("cannot read the server's version: {e}"),
                "check the connection",
            )];
        }
    };
    let version = sv::display(num);
    let range = format!("{} to {}", sv::OLDEST_MAJOR, sv::NEWEST_TESTED_MAJOR);
    let mut out = vec![match sv::support(num) {
        sv::Support::Supported => Finding::ok("server", format!("PostgreSQL {version} (supported: {range})")),
        sv::Support::TooOld => Finding::error(
            "server",
            format!("PostgreSQL {version} is not supported ({} or newer)", sv::OLDEST_MAJOR),
            format!("upgrade the server to PostgreSQL {} or newer", sv::OLDEST_MAJOR),
        ),
        sv::Support::Untested => Finding::warning(
            "server",
            format!("PostgreSQL {version} is newer than any major highwater was tested on ({range})"),
            "run the test suite against it (e2e/pg/majors.sh), or use a tested major",
        ),
    }];
    if standby {
        out.push(Finding::error(
            "server",
            "the database is a hot standby (pg_is_in_recovery() is true): highwater writes on every command",
            "point DATABASE_URL at the primary's read-write service",
        ));
    }
    out
}

pub async fn schema(pool: &PgPool, url: &str) -> Finding {
    match window::check(pool, url).await {
        Ok(()) => match window::recorded(pool).await {
            Ok(Some(r)) => Finding::ok(
                "schema",
                format!(
                    "schema version {} (migrated by release {}, accepts binaries of schema {} and newer); this binary: \
                     release {}, schema {}",
                    r.version,
                    r.release,
                    r.oldest_binary,
                    window::RELEASE,
                    window::SCHEMA_VERSION
                ),
            ),
            _ => Finding::ok("schema", "inside this binary's window"),
        },
        Err(e) => Finding::from_error("schema", Level::Error, &e),
    }
}

/// What `role` needs, as (what, SQL that is true when allowed).
fn needs(role: Role) -> &'static [(&'static str, &'static str)] {
    match role {
        Role::Dispatcher => &[
            ("USAGE on schema highwater", "has_schema_privilege('highwater', 'USAGE')"),
            ("SELECT on highwater.events", "has_table_privilege('highwater.events', 'SELECT')"),
            (
                "UPDATE on highwater.consumer_shards",
                "has_table_privilege('highwater.consumer_shards', 'SELECT, UPDATE')",
            ),
            ("SELECT on highwater.consumers", "has_table_privilege('highwater.consumers', 'SELECT')"),
            (
                "INSERT, UPDATE on highwater.dispatchers",
                "has_table_privilege('highwater.dispatchers', 'INSERT, UPDATE')",
            ),
        ],
        Role::Operator => &[
            ("USAGE on schema highwater", "has_schema_privilege('highwater', 'USAGE')"),
            (
                "INSERT, UPDATE, DELETE on highwater.consumers",
                "has_table_privilege('highwater.consumers', 'INSERT, UPDATE, DELETE')",
            ),
            (
                "INSERT, DELETE on highwater.consumer_shards",
                "has_table_privilege('highwater.consumer_shards', 'INSERT, DELETE')",
            ),
        ],
        Role::Application => &[
            ("USAGE on schema highwater", "has_schema_privilege('highwater', 'USAGE')"),
            (
                "EXECUTE on highwater.append",
                "has_function_privilege('highwater.append(text, text, text, jsonb, jsonb, text, bigint)', 'EXECUTE')",
            ),
        ],
        Role::Owner => &[(
            "ownership of schema highwater (or CREATE on the database, before the first migrate)",
            "coalesce((SELECT pg_has_role(nspowner, 'USAGE') FROM pg_namespace WHERE nspname = 'highwater'),
                      has_database_privilege(current_database(), 'CREATE'))",
        )],
    }
}

pub async fn privileges(pool: &PgPool, role: Role) -> Vec<Finding> {
    let user: String = sqlx::query_scalar("SELECT current_user::text").fetch_one(pool).await.unwrap_or_default();
    let superuser: bool = sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        .fetch_one(pool)
        .await
        .unwrap_or(false);
    let mut missing = Vec::new();
    for (what, sql) in needs(role) {
        // A missing schema or table makes the function itself fail: that is the schema check's
        // finding; here it counts as not allowed.
        let allowed: bool =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {sql}"))).fetch_one(pool).await.unwrap_or(false);
        if !allowed {
            missing.push(*what);
        }
    }
    let role_name = format!("{role:?}").to_lowercase();
    let mut out = Vec::new();
    if missing.is_empty() {
        out.push(Finding::ok("privileges", format!("role {user:?} may do what the {role_name} does")));
    } else {
        out.push(Finding::error(
            "privileges",
            format!("role {user:?} lacks what the {role_name} needs: {}", missing.join("; ")),
            format!("apply the grants of `highwater roles --print` for the {role_name} (docs/security.md, \"Database roles\")"),
        ));
    }
    if superuser && role != Role::Owner {
        out.push(Finding::warning(
            "privileges",
            format!("role {user:?} is a superuser: the {role_name} needs far less"),
            "give it a role of its own with the grants of `highwater roles --print`",
        ));
    }
    out
}

/// LISTEN on a connection of its own, NOTIFY from another: the dispatchers' wake-up and the
/// waits of read-your-writes. Through a transaction-mode pooler the notification never arrives.
pub async fn listen(pool: &PgPool) -> Finding {
    let channel = format!("highwater_doctor_{}", std::process::id());
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(l) => l,
        Err(e) => {
            return Finding::error(
                "listen",
                format!("cannot open a listening connection: {e}"),
                "check the connection",
            );
        }
    };
    if let Err(e) = listener.listen(&channel).await {
        return Finding::error("listen", format!("LISTEN failed: {e}"), "use a direct or session-mode URL");
    }
    if let Err(e) = sqlx::query("SELECT pg_notify($1, 'doctor')").bind(&channel).execute(pool).await {
        return Finding::error("listen", format!("NOTIFY failed: {e}"), "use a direct or session-mode URL");
    }
    match tokio::time::timeout(Duration::from_secs(2), listener.recv()).await {
        Ok(Ok(_)) => Finding::ok("listen", "LISTEN/NOTIFY reach this session (dispatchers wake up at once)"),
        _ => Finding::warning(
            "listen",
            "a NOTIFY did not reach a LISTEN session within 2 s: dispatchers would fall back to polling, and a \
             transaction-mode pooler in between would also break the Shared claim",
            "point DATABASE_URL at PostgreSQL directly or at a session-mode pool (docs/operations.md, \"Behind a \
             connection pooler\")",
        ),
    }
}

/// No sink of highwater reads the WAL (delivery reads the table): `wal_level` is only reported.
pub async fn wal_level(pool: &PgPool) -> Finding {
    let level: String =
        sqlx::query_scalar("SELECT current_setting('wal_level')").fetch_one(pool).await.unwrap_or_default();
    Finding::ok("wal_level", format!("wal_level = {level} (no highwater sink needs logical decoding)"))
}

/// Whether session state survives between transactions: not behind a transaction-mode pooler,
/// where the Shared claim (a session advisory lock) and LISTEN would not hold.
pub async fn pooler(pool: &PgPool) -> Finding {
    match crate::pooler::check(pool).await {
        Ok(()) => Finding::ok("pooler", "session state survives between transactions (direct, or a session-mode pool)"),
        Err(e) => Finding::from_error("pooler", Level::Error, &e),
    }
}
