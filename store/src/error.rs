use sqlx::postgres::PgDatabaseError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error names the problem and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{message}{}", hint_suffix(.hint))]
    UnknownEventType { message: String, hint: Option<String> },
    #[error("{message}{}", hint_suffix(.hint))]
    InvalidPayload { message: String, hint: Option<String> },
    #[error("{message}{}", hint_suffix(.hint))]
    VersionConflict { message: String, hint: Option<String> },
    #[error(
        "cannot reach the database at {target}: {source}\n  fix: check --database-url / \
         DATABASE_URL and that PostgreSQL is running and accepts connections"
    )]
    Unreachable {
        target: String,
        #[source]
        source: sqlx::Error,
    },
    #[error(
        "the database at {target} has no highwater schema, or one older than this binary (release {}, \
         schema version {})\n  fix: run `highwater migrate` of this release against it first (the chart's \
         pre-upgrade hook does)",
        crate::migrate::window::RELEASE,
        crate::migrate::window::SCHEMA_VERSION
    )]
    NotMigrated { target: String },
    #[error("invalid consumer definition in {origin}: {problem}")]
    Definition { origin: String, problem: String },
    /// A request that does not apply (a transition, a prune, a name), with how to get past it.
    #[error("{0}")]
    Refused(Refusal),
    /// Two declarations claim one consumer name.
    #[error("{0}")]
    Conflict(String),
    /// A flag, an environment variable or a setting that cannot work, with how to fix it.
    #[error("{0}")]
    Config(Refusal),
    /// A broken invariant: a bug in highwater, never a consequence of the input.
    #[error("internal error: {0}")]
    Internal(String),
    /// The throwaway PostgreSQL of the quickstart and the tests could not be set up.
    #[error("embedded PostgreSQL: {0}")]
    Embedded(String),
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("a task stopped: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("{}", database_message(.0))]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// Hints for errors that `highwater.append` raises without one (a migration already applied
/// cannot change, so they are added here, where the SQLSTATE becomes a typed error).
fn missing_hint(code: &str, message: &str) -> Option<String> {
    match code {
        "HW002" if message.starts_with("metadata must be a JSON object") => Some(
            "pass metadata as a JSON object, e.g. {\"user\": \"ops\"}, or none at all \
             (correlation_id is filled in when absent); put other values under a key"
                .into(),
        ),
        "HW001" | "HW002" | "HW003" | "HW004" | "HW030" => {
            Some(format!("see SQLSTATE {code} under \"Errors\" in docs/events.md"))
        }
        _ => None,
    }
}

/// What was refused and, where there is one, what to do about it: printed as the problem, then
/// `  fix: …` on its own line, the shape every highwater error has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub problem: String,
    pub fix: Option<String>,
    /// The consumer that does not exist, when that is the refusal ([`Error::no_consumer`]): what
    /// callers classify by (HTTP 404, `highwater_ops::Error::NotFound`), never the message text.
    pub unknown_consumer: Option<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.problem)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n  fix: {fix}")?;
        }
        Ok(())
    }
}

/// A database error as sqlx shows it, but a server error with its SQLSTATE instead of sqlx's
/// ` at line N`: N is the line of PostgreSQL's C source that raised it (the `L` field), which
/// reads like a line of the user's SQL (issue 44).
fn database_message(e: &sqlx::Error) -> String {
    match e.as_database_error() {
        Some(db) => format!(
            "error returned from database: {} (SQLSTATE {})",
            db.message(),
            db.code().as_deref().unwrap_or("unknown")
        ),
        None => e.to_string(),
    }
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!("\n  fix: {h}")).unwrap_or_default()
}

impl Error {
    pub fn refused(problem: impl Into<String>) -> Error {
        Error::Refused(Refusal { problem: problem.into(), fix: None, unknown_consumer: None })
    }

    /// The refusal of a name that is no consumer: the one place its message is written.
    pub fn no_consumer(name: &str) -> Error {
        Error::Refused(Refusal {
            problem: format!("no consumer named {name:?}"),
            fix: Some("`highwater consumer list` shows them".into()),
            unknown_consumer: Some(name.to_owned()),
        })
    }

    /// The consumer an [`Error::no_consumer`] refusal names; `None` for every other error.
    pub fn unknown_consumer(&self) -> Option<&str> {
        match self {
            Error::Refused(r) => r.unknown_consumer.as_deref(),
            _ => None,
        }
    }

    pub fn config(problem: impl Into<String>) -> Error {
        Error::Config(Refusal { problem: problem.into(), fix: None, unknown_consumer: None })
    }

    /// The fix line of a refusal or a configuration error; other errors are returned as they are.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Error {
        if let Error::Refused(r) | Error::Config(r) = &mut self {
            r.fix = Some(fix.into());
        }
        self
    }

    /// A refusal's problem with `context` put before it (which document, which version); other
    /// errors are returned as they are.
    pub fn in_context(mut self, context: &str) -> Error {
        if let Error::Refused(r) | Error::Config(r) = &mut self {
            r.problem = format!("{context}{}", r.problem);
        }
        self
    }

    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }

    /// The connection broke or the server is going away (restart, failover, network): trying
    /// again later may succeed, unlike a refused statement.
    pub fn is_connection_loss(&self) -> bool {
        let Error::Database(e) = self else { return false };
        match e {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")),
            _ => false,
        }
    }

    /// Maps the SQLSTATEs raised by `highwater.append` to their variants.
    pub fn from_append(e: sqlx::Error) -> Error {
        if let Some(db) = e.as_database_error()
            && let Some(pg) = db.try_downcast_ref::<PgDatabaseError>()
        {
            let message = pg.message().to_owned();
            let hint = pg.hint().map(str::to_owned).or_else(|| missing_hint(pg.code(), &message));
            match pg.code() {
                // HW004: a schema version the type does not have (the eight-argument append).
                "HW001" | "HW004" => return Error::UnknownEventType { message, hint },
                // HW030: a stream type, stream id, event type or payload over its size limit
                // (append_limits.sql): bad input like HW002, never worth retrying as it is.
                "HW002" | "HW030" => return Error::InvalidPayload { message, hint },
                "HW003" => return Error::VersionConflict { message, hint },
                // jsonb cannot hold \u0000: the server refuses the payload before the function runs.
                "22P05" => {
                    return Error::InvalidPayload {
                        message: format!("payload or metadata refused by PostgreSQL: {message}"),
                        hint: Some(
                            "fix the payload: jsonb cannot store the character \\u0000 in a string; \
                             remove it or encode the data (e.g. base64)"
                                .into(),
                        ),
                    };
                }
                _ => {}
            }
        }
        Error::Database(e)
    }
}
