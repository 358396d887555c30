//! `highwater doctor`: what stands between this database and a working highwater, each finding
//! with its fix. It never writes (one NOTIFY on a channel of its own aside) and never stops at
//! the first problem: a user fixing a setup wants the whole list, in seconds.
mod checks;
mod fence;

use serde::Serialize;

use crate::Error;

/// How bad a finding is; the command's exit code is the worst: 0 ok, 1 warnings, 2 errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warning,
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Which check: `connection`, `server`, `pooler`, `schema`, `privileges`, `listen`, `wal_level`, `fence`.
    pub check: &'static str,
    pub level: Level,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub fn ok(check: &'static str, message: impl Into<String>) -> Finding {
        Finding { check, level: Level::Ok, message: message.into(), fix: None }
    }

    pub fn warning(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check, level: Level::Warning, message: message.into(), fix: Some(fix.into()) }
    }

    pub fn error(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check, level: Level::Error, message: message.into(), fix: Some(fix.into()) }
    }

    /// A refusal of the binaries (they print `problem\n  fix: …`) as a finding.
    pub fn from_error(check: &'static str, level: Level, e: &Error) -> Finding {
        let text = e.to_string();
        let (message, fix) = match text.split_once("\n  fix: ") {
            Some((m, f)) => (m.to_owned(), Some(f.to_owned())),
            None => (text, None),
        };
        Finding { check, level, message, fix }
    }
}

/// Whose URL it is: what the role must be allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `highwater dispatch` (and the CLI's ops commands).
    Dispatcher,
    /// `highwater-operator`.
    Operator,
    /// An application that appends and waits.
    Application,
    /// `highwater migrate`: the schema's owner.
    Owner,
}

/// Every check against `url`, as `role`; a transaction holding the fence for longer than
/// `long_transaction` is a warning.
pub async fn run(url: &str, role: Role, long_transaction: std::time::Duration) -> Vec<Finding> {
    let pool = match crate::db::connect(url, 3).await {
        Ok(p) => p,
        Err(e) => return vec![Finding::from_error("connection", Level::Error, &e)],
    };
    let mut out = vec![Finding::ok("connection", format!("connected to {}", crate::db::describe_target(url)))];
    out.extend(checks::server(&pool).await);
    out.push(checks::pooler(&pool).await);
    out.push(checks::schema(&pool, url).await);
    out.extend(checks::privileges(&pool, role).await);
    out.push(checks::listen(&pool).await);
    out.push(checks::wal_level(&pool).await);
    out.extend(fence::check(&pool, long_transaction).await);
    pool.close().await;
    out
}

/// The checks that concern the people on call, on an open `pool` (the console's overview):
/// server, pooler, schema, LISTEN/NOTIFY, wal_level and the fence. Not the privileges: they are
/// the console's own role's, not the dispatchers'.
pub async fn on_pool(pool: &sqlx::PgPool, long_transaction: std::time::Duration) -> Vec<Finding> {
    let o = pool.connect_options();
    let url =
        format!("postgres://{}@{}:{}/{}", o.get_username(), o.get_host(), o.get_port(), o.get_database().unwrap_or(""));
    let mut out = checks::server(pool).await;
    out.push(checks::pooler(pool).await);
    out.push(checks::schema(pool, &url).await);
    out.push(checks::listen(pool).await);
    out.push(checks::wal_level(pool).await);
    out.extend(fence::check(pool, long_transaction).await);
    out
}

/// 0 when every finding is ok, 1 with warnings, 2 with errors.
pub fn exit_code(findings: &[Finding]) -> u8 {
    match findings.iter().map(|f| f.level).max() {
        Some(Level::Error) => 2,
        Some(Level::Warning) => 1,
        _ => 0,
    }
}
