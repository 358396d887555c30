//! What every ops endpoint (redrive, replay, discard) does the same way: the ops bearer token as
//! a layer in front of them ([`require_ops_token`]), the JSON body, texts PostgreSQL cannot
//! store, and the answer within a deadline (a database that does not answer is a 503, not a
//! request hanging on the pool's connection attempts). The operation itself and its errors'
//! statuses are `highwater_ops`'s (`IntoResponse` by variant: 404 unknown consumer, 409 refused,
//! 400 invalid, 503 the database).
use std::future::Future;

use axum::{
    Json,
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use highwater_ops::{Error, Ran, Result};
use serde::{Serialize, de::DeserializeOwned};

use crate::sse::Tokens;

/// How long a request may take before it is a 503.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Who asks, as the audit records it: `http:ops-token-N` for the Nth ops token.
#[derive(Debug, Clone)]
pub struct Caller(pub String);

/// The layer of the ops routes: a known ops token, or the 401 before anything else is read.
pub async fn require_ops_token(State(tokens): State<Tokens>, mut request: Request, next: Next) -> Response {
    match tokens.which(request.headers()) {
        Some(which) => {
            request.extensions_mut().insert(Caller(format!("http:ops-token-{}", which + 1)));
            next.run(request).await
        }
        None => (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or unknown bearer token\n")
            .into_response(),
    }
}

/// The body as `T`, or the 400 naming `what` was expected and an `example` of it.
pub fn body<T: DeserializeOwned>(bytes: &[u8], what: &str, example: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::invalid(format!("the request body is not {what}: {e}"), format!("send JSON such as {example}"))
    })
}

/// The 400 for a NUL character in any of `texts` (PostgreSQL text cannot hold one).
pub fn no_nul<'a>(texts: impl IntoIterator<Item = Option<&'a String>>) -> Result<()> {
    if texts.into_iter().flatten().any(|t| t.contains('\0')) {
        return Err(Error::invalid(
            "a name or a text of the request contains a NUL character",
            "PostgreSQL text cannot hold NUL; remove it",
        ));
    }
    Ok(())
}

/// The answer of an operation's run: 200 with a dry run's preview, `executed` with the outcome.
pub async fn answer<P: Serialize, O: Serialize>(
    executed: StatusCode,
    run: impl Future<Output = Result<Ran<P, O>>>,
) -> Result<Response> {
    let Ok(ran) = tokio::time::timeout(ANSWER_WITHIN, run).await else {
        return Err(Error::Unavailable {
            problem: format!("the database did not answer within {}", humantime::format_duration(ANSWER_WITHIN)),
            fix: Some("GET /readyz says whether this dispatcher reaches its database".into()),
        });
    };
    Ok(match ran? {
        Ran::Previewed(p) => (StatusCode::OK, Json(p)).into_response(),
        Ran::Executed(o) => (executed, Json(o)).into_response(),
    })
}
