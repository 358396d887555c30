//! The errors of an operation, typed by what a front end does with them: the CLI's exit code
//! ([`Error::exit_code`]), the HTTP status (`crate::http`, feature `http`) and whether the
//! operator reports a Warning Event or retries ([`Error::is_refusal`]). Each is mapped once, by
//! variant; the text is the store's (a problem, then `  fix: …`), unchanged.
use highwater_store::error::Refusal;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No consumer of that name (HTTP 404).
    #[error("{}", highwater_store::Error::no_consumer(.consumer))]
    NotFound { consumer: String },
    /// A request that does not apply as things stand: not a dead letter, pruned, pending already,
    /// nothing matches, a confirmation not given (HTTP 409).
    #[error("{}", refusal(.problem, .fix))]
    Refused { problem: String, fix: Option<String> },
    /// A request that cannot be right whatever the database holds: a malformed body or value
    /// (HTTP 400).
    #[error("{}", refusal(.problem, .fix))]
    Invalid { problem: String, fix: Option<String> },
    /// The database did not answer in time (HTTP 503).
    #[error("{}", refusal(.problem, .fix))]
    Unavailable { problem: String, fix: Option<String> },
    /// Anything else the store raised: the database, a broken invariant (HTTP 503).
    #[error(transparent)]
    Store(highwater_store::Error),
}

fn refusal(problem: &str, fix: &Option<String>) -> Refusal {
    Refusal { problem: problem.to_owned(), fix: fix.clone(), unknown_consumer: None }
}

/// The CLI's exit code when the requests were made but some are still pending after `--wait`
/// (distinct from a refusal, 1: scripts retry on 2).
pub const EXIT_PENDING: u8 = 2;

impl Error {
    pub fn refused(problem: impl Into<String>, fix: impl Into<String>) -> Error {
        Error::Refused { problem: problem.into(), fix: Some(fix.into()) }
    }

    pub fn invalid(problem: impl Into<String>, fix: impl Into<String>) -> Error {
        Error::Invalid { problem: problem.into(), fix: Some(fix.into()) }
    }

    /// The CLI's exit code: 1 for every error, as for every other command (2 is
    /// [`EXIT_PENDING`], not an error).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NotFound { .. }
            | Error::Refused { .. }
            | Error::Invalid { .. }
            | Error::Unavailable { .. }
            | Error::Store(_) => 1,
        }
    }

    /// A refusal of the request, nothing changed: the operator reports it as a Warning Event with
    /// the operation's refused reason. Anything else is an error to retry (the database).
    pub fn is_refusal(&self) -> bool {
        match self {
            Error::NotFound { .. } | Error::Refused { .. } | Error::Invalid { .. } => true,
            Error::Unavailable { .. } | Error::Store(_) => false,
        }
    }
}

/// The store's errors by kind: an unknown consumer by the field its one constructor sets
/// (`Error::no_consumer`), never by the message.
impl From<highwater_store::Error> for Error {
    fn from(e: highwater_store::Error) -> Error {
        if let Some(consumer) = e.unknown_consumer() {
            return Error::NotFound { consumer: consumer.to_owned() };
        }
        match e {
            highwater_store::Error::Refused(r) => Error::Refused { problem: r.problem, fix: r.fix },
            highwater_store::Error::Config(r) => Error::Invalid { problem: r.problem, fix: r.fix },
            e => Error::Store(e),
        }
    }
}

/// Back to the store's error for front ends whose other commands return it (the CLI): the same
/// text, and the same kind for code that matches on it.
impl From<Error> for highwater_store::Error {
    fn from(e: Error) -> highwater_store::Error {
        let with = |e: highwater_store::Error, fix: Option<String>| match fix {
            Some(fix) => e.with_fix(fix),
            None => e,
        };
        match e {
            Error::NotFound { consumer } => highwater_store::Error::no_consumer(&consumer),
            Error::Refused { problem, fix } => with(highwater_store::Error::refused(problem), fix),
            Error::Invalid { problem, fix } | Error::Unavailable { problem, fix } => {
                with(highwater_store::Error::config(problem), fix)
            }
            Error::Store(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Error> {
        vec![
            Error::from(highwater_store::Error::no_consumer("nope")),
            Error::refused("nothing matches", "list them"),
            Error::invalid("bad body", "send JSON"),
            Error::Unavailable { problem: "no answer".into(), fix: None },
            Error::Store(highwater_store::Error::Internal("bug".into())),
        ]
    }

    #[test]
    fn an_unknown_consumer_is_classified_by_its_constructor_not_its_text() {
        let e = Error::from(highwater_store::Error::no_consumer("nope"));
        assert!(matches!(&e, Error::NotFound { consumer } if consumer == "nope"), "{e:?}");
        assert_eq!(e.to_string(), "no consumer named \"nope\"\n  fix: `highwater consumer list` shows them");
        // The same words built by hand are a plain refusal: nothing matches the text.
        let look_alike = highwater_store::Error::refused("no consumer named \"nope\"");
        assert!(matches!(Error::from(look_alike), Error::Refused { .. }));
    }

    #[test]
    fn every_error_exits_1_as_every_other_command_does() {
        for e in every_kind() {
            assert_eq!(e.exit_code(), 1, "{e:?}");
        }
        assert_eq!(EXIT_PENDING, 2);
    }

    #[test]
    fn refusals_are_events_and_the_rest_retried() {
        let refusals: Vec<bool> = every_kind().iter().map(Error::is_refusal).collect();
        assert_eq!(refusals, [true, true, true, false, false]);
    }

    #[test]
    fn the_round_trip_through_the_store_error_keeps_text_and_kind() {
        for e in every_kind() {
            let text = e.to_string();
            let back: highwater_store::Error = e.into();
            assert_eq!(back.to_string(), text);
        }
        let back: highwater_store::Error = Error::refused("p", "f").into();
        assert!(matches!(back, highwater_store::Error::Refused(_)));
        let back: highwater_store::Error = Error::from(highwater_store::Error::no_consumer("x")).into();
        assert_eq!(back.unknown_consumer(), Some("x"));
    }
}
