//! Why a connection failed, said as a person would fix it. A wrong password, a missing database
//! or a login the server refuses will not fix itself: they are reported at once, in one line
//! with the fix, and never retried; a server that does not answer (yet) is retried by the
//! callers that wait for one.
use crate::Error;

/// The error of a failed first connection to `url`.
pub fn explain(url: &str, source: sqlx::Error) -> Error {
    let target = super::db::describe_target(url);
    let Some(db) = source.as_database_error() else { return Error::Unreachable { target, source } };
    let message = db.message().to_owned();
    match db.code().as_deref() {
        Some("28P01") => Error::refused(format!("the database at {target} refused the password: {message}")).with_fix(
            "correct the password in DATABASE_URL (or the Secret it comes from); percent-encode any @ : / ? # in it",
        ),
        Some("3D000") => Error::refused(format!("{message} (the server at {target} answered)"))
            .with_fix("create it (CREATE DATABASE ...) or correct the database name at the end of DATABASE_URL"),
        Some("28000") => Error::refused(format!("the database at {target} refused the login: {message}")).with_fix(
            "create the role with LOGIN (`highwater roles --print` has the statements), or allow it in pg_hba.conf",
        ),
        _ => Error::Unreachable { target, source },
    }
}

/// Whether waiting could help: only for a server that did not answer or had no room.
pub fn retriable(e: &Error) -> bool {
    matches!(e, Error::Unreachable { .. })
}
