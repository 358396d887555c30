//! The compatibility window: which schema versions this binary runs against, and which binaries
//! the schema it migrates to accepts (docs/operations.md, "Upgrading").
//!
//! Every release that changes the schema raises [`SCHEMA_VERSION`]; `highwater migrate` records it
//! in `highwater.schema_version` with [`OLDEST_BINARY`] (raised by a migration marked breaking).
//! A binary runs against a schema whose version is at least its own (else: migrate first) and
//! whose oldest accepted binary is at most its own (else: the schema has moved past it).
use sqlx::{PgConnection, PgPool};

use crate::{Error, Result, db::describe_target};

/// This release, as CHANGELOG.md names it.
pub const RELEASE: &str = "0.4.0";
/// The schema version this binary's `migrate` produces, and the oldest schema it runs against
/// (it calls the functions of that version). Releases before the window was recorded had 1
/// (0.1.0) and 2 (0.2.0); 0.3.0 had 3, and 0.4.0 had 4 until event versions
/// (20261205000000_event_type_versions.sql: this binary reads their tables and column), then 5
/// until the flow-control table and the shard-change audit (20261207000000_consumer_flow.sql,
/// 20261208000100_shard_changes.sql: this binary writes both).
pub const SCHEMA_VERSION: i32 = 6;
/// The oldest binary (named by its schema version) that may run against this release's schema:
/// everything this release changed keeps 0.1.0's functions and columns working (expand/contract).
pub const OLDEST_BINARY: i32 = 1;

/// What `highwater.schema_version` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub version: i32,
    pub oldest_binary: i32,
    pub release: String,
    /// Of `migrations/definitions/` as last applied ([`super::Plan::definitions_checksum`]).
    pub definitions_checksum: Vec<u8>,
}

/// Where this binary stands against a recorded schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    Inside,
    /// The schema is older than this binary needs: migrate first.
    SchemaTooOld,
    /// The schema no longer accepts binaries as old as this one.
    BinaryTooOld,
}

pub fn fit(r: &Recorded, binary: i32) -> Fit {
    if r.version < binary {
        Fit::SchemaTooOld
    } else if r.oldest_binary > binary {
        Fit::BinaryTooOld
    } else {
        Fit::Inside
    }
}

/// Reads the recorded window; `None` when the schema predates it (or does not exist).
pub async fn recorded(pool: &PgPool) -> Result<Option<Recorded>> {
    read(&mut *pool.acquire().await?).await
}

/// [`recorded`] on a connection (inside `migrate`'s transaction: a missing table must not be
/// an error there, it would abort the transaction).
pub(super) async fn read(conn: &mut PgConnection) -> Result<Option<Recorded>> {
    let exists: bool =
        sqlx::query_scalar("SELECT to_regclass('highwater.schema_version') IS NOT NULL").fetch_one(&mut *conn).await?;
    if !exists {
        return Ok(None);
    }
    let row: Option<(i32, i32, String, Vec<u8>)> =
        sqlx::query_as("SELECT version, oldest_binary, release, definitions_checksum FROM highwater.schema_version")
            .fetch_optional(&mut *conn)
            .await?;
    Ok(row.map(|(version, oldest_binary, release, definitions_checksum)| Recorded {
        version,
        oldest_binary,
        release,
        definitions_checksum,
    }))
}

/// Refuses to start against a schema outside this binary's window, naming the fix.
///
/// Every binary checks this before its work (dispatch, the operator, the CLI), so the server's
/// version is checked here first: pointed at an unsupported server, they name the server, not a
/// missing schema whose fix (`migrate`) would only be refused in turn.
pub async fn check(pool: &PgPool, url: &str) -> Result<()> {
    super::server_version::check(pool).await?;
    let target = describe_target(url);
    schema_usage(pool, &target).await?;
    let recorded = recorded(pool).await.map_err(|e| match &e {
        Error::Database(d) if d.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "42501") => {
            no_privilege(&d.as_database_error().map(|d| d.message().to_owned()).unwrap_or_default(), &target)
        }
        _ => e,
    })?;
    match recorded {
        None => Err(Error::NotMigrated { target }),
        Some(r) => match fit(&r, SCHEMA_VERSION) {
            Fit::Inside => Ok(()),
            Fit::SchemaTooOld => Err(Error::NotMigrated { target }),
            Fit::BinaryTooOld => Err(too_old(&r, &target)),
        },
    }
}

/// A role without `USAGE` on schema `highwater` sees none of it: without this check it would be
/// told to migrate (the schema looks missing) or fail at its first statement.
async fn schema_usage(pool: &PgPool, target: &str) -> Result<()> {
    let (user, denied): (String, bool) = sqlx::query_as(
        "SELECT current_user::text, EXISTS (SELECT FROM pg_catalog.pg_namespace
                                             WHERE nspname = 'highwater' AND NOT has_schema_privilege(oid, 'USAGE'))",
    )
    .fetch_one(pool)
    .await?;
    if denied {
        return Err(no_privilege(&format!("role {user:?} has no USAGE on schema highwater"), target));
    }
    Ok(())
}

/// A permission refused at start (SQLSTATE 42501), with the fix.
fn no_privilege(problem: &str, target: &str) -> Error {
    Error::refused(format!("{problem} at {target}")).with_fix(
        "run the grants of `highwater roles --print` for this role (part 2, as the schema's owner; \
         docs/security.md, \"Database roles\")",
    )
}

/// The refusal of a binary older than the schema's window.
pub fn too_old(r: &Recorded, target: &str) -> Error {
    Error::refused(format!(
        "the schema at {target} (version {}, migrated by release {}) no longer supports this binary \
         (release {RELEASE}, schema version {SCHEMA_VERSION}): it accepts binaries of schema version {} or newer",
        r.version, r.release, r.oldest_binary
    ))
    .with_fix(format!(
        "run the image of release {} or newer (helm upgrade does it; docs/operations.md, \"Upgrading\")",
        r.release
    ))
}

/// For a running dispatcher: true while the schema still accepts this binary. A schema that
/// cannot be read (connection lost) counts as accepting: the next check decides.
pub async fn still_inside(pool: &PgPool) -> bool {
    match recorded(pool).await {
        Ok(Some(r)) => fit(&r, SCHEMA_VERSION) != Fit::BinaryTooOld,
        Ok(None) | Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(version: i32, oldest_binary: i32) -> Recorded {
        Recorded { version, oldest_binary, release: "x".into(), definitions_checksum: Vec::new() }
    }

    #[test]
    fn the_release_recorded_in_the_schema_is_the_crate_version() {
        // `highwater --version`, the chart's appVersion and the image tag say the same release.
        assert_eq!(RELEASE, env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn a_binary_fits_between_its_schema_and_the_schemas_oldest_binary() {
        assert_eq!(fit(&rec(3, 1), 3), Fit::Inside);
        assert_eq!(fit(&rec(5, 3), 3), Fit::Inside);
        assert_eq!(fit(&rec(2, 1), 3), Fit::SchemaTooOld);
        assert_eq!(fit(&rec(5, 4), 3), Fit::BinaryTooOld);
    }
}
