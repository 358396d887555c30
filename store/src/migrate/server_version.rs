//! Which PostgreSQL servers highwater runs on (docs/operations.md, "Supported PostgreSQL").
//!
//! Checked before `migrate` writes anything and when the dispatcher, the operator and the CLI
//! start, so that an unsupported server is named as such instead of failing later inside a
//! migration or a function with an error about a missing operator or aggregate.
use sqlx::PgPool;

use crate::{Error, Result};

/// The oldest major the schema works on: migrations/definitions/ replaces its triggers with
/// `CREATE OR REPLACE TRIGGER`, which 13 does not have. (xid8's min() and max() are 15's: the
/// schema reads the highest xid8 with ORDER BY ... DESC LIMIT 1 instead, which 14 runs.)
pub const OLDEST_MAJOR: u32 = 14;
/// The newest major the version matrix of `.ci/run` tests (e2e/pg/versions). A newer one is let
/// through with a warning: a new major rarely breaks what highwater uses, but nobody checked.
pub const NEWEST_TESTED_MAJOR: u32 = 18;

/// Where a server stands against the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    Supported,
    TooOld,
    Untested,
}

/// `server_version_num` → the major version (13 for 130023, 9 for 90624).
pub fn major(num: u32) -> u32 {
    num / 10_000
}

/// `server_version_num` as people write it: 13.23, 9.6.24.
pub fn display(num: u32) -> String {
    if num >= 100_000 {
        format!("{}.{}", num / 10_000, num % 10_000)
    } else {
        format!("{}.{}.{}", num / 10_000, num / 100 % 100, num % 100)
    }
}

pub fn support(num: u32) -> Support {
    match major(num) {
        m if m < OLDEST_MAJOR => Support::TooOld,
        m if m > NEWEST_TESTED_MAJOR => Support::Untested,
        _ => Support::Supported,
    }
}

/// Refuses a server older than [`OLDEST_MAJOR`] and a hot standby; warns about a major newer
/// than the matrix.
pub async fn check(pool: &PgPool) -> Result<()> {
    // First: through a transaction pooler the next (prepared) statement would fail obscurely.
    crate::pooler::check(pool).await?;
    // server_version_num, not version(): a number in every major, with no distributor's suffix.
    let (num, standby): (i32, bool) =
        sqlx::query_as("SELECT current_setting('server_version_num')::int, pg_is_in_recovery()")
            .fetch_one(pool)
            .await?;
    let num = u32::try_from(num).unwrap_or(0);
    if standby {
        // Every command writes (cursors, heartbeats, events, the schema): on a standby the first
        // write would fail with a bare "cannot execute ... in a read-only transaction".
        return Err(Error::refused(
            "the database is a hot standby (pg_is_in_recovery() is true): highwater writes on every command and a \
             standby is read-only; nothing was changed",
        )
        .with_fix(
            "point DATABASE_URL at the primary: its read-write service (CloudNativePG: <cluster>-rw; a managed \
             database's writer endpoint), not a replica or read-only endpoint",
        ));
    }
    match support(num) {
        Support::Supported => Ok(()),
        Support::TooOld => Err(too_old(num)),
        Support::Untested => {
            tracing::warn!(
                server = %display(num),
                newest_tested = NEWEST_TESTED_MAJOR,
                "PostgreSQL {} is newer than any major highwater was tested on ({OLDEST_MAJOR} to \
                 {NEWEST_TESTED_MAJOR}); continuing",
                display(num)
            );
            Ok(())
        }
    }
}

fn too_old(num: u32) -> Error {
    Error::refused(format!(
        "PostgreSQL {} is not supported ({OLDEST_MAJOR} or newer; tested: {OLDEST_MAJOR} to {NEWEST_TESTED_MAJOR}); \
         nothing was changed",
        display(num)
    ))
    .with_fix(format!(
        "upgrade the server to PostgreSQL {OLDEST_MAJOR} or newer (pg_upgrade, or your provider's major-version \
         upgrade), then run highwater again"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_are_read_from_server_version_num() {
        assert_eq!((major(130023), display(130023)), (13, "13.23".to_owned()));
        assert_eq!((major(180006), display(180006)), (18, "18.6".to_owned()));
        assert_eq!((major(90624), display(90624)), (9, "9.6.24".to_owned()));
    }

    #[test]
    fn thirteen_and_older_are_refused_newer_than_the_matrix_is_let_through() {
        assert_eq!(support(90624), Support::TooOld);
        assert_eq!(support(130023), Support::TooOld);
        assert_eq!(support(140000), Support::Supported);
        assert_eq!(support(180006), Support::Supported);
        assert_eq!(support(190001), Support::Untested);
        assert!(too_old(130023).to_string().starts_with("PostgreSQL 13.23 is not supported (14 or newer"));
    }
}
