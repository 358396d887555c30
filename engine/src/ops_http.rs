//! What every ops endpoint (redrive, replay, discard) does the same way: the ops bearer token,
//! the JSON body, texts PostgreSQL cannot store, and the answer — within a deadline (a database
//! that does not answer is a 503, not a request hanging on the pool's connection attempts),
//! refusals mapped to 404 (unknown consumer) and 409 (anything else refused).
use std::future::Future;

use axum::{
    Json,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

use crate::redrive_http::OpsState;
use highwater_store::{Error, Result};

/// A step's value, or the answer that refuses the request (boxed: a `Response` is large).
pub type Refusable<T> = std::result::Result<T, Box<Response>>;

/// How long a request may take before it is a 503.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

pub fn refusal(status: StatusCode, e: &Error) -> Response {
    (status, Json(json!({"error": e.to_string()}))).into_response()
}

fn bad_request(e: Error) -> Response {
    refusal(StatusCode::BAD_REQUEST, &e)
}

/// Who asks: `http:ops-token-N` for the Nth ops token, or the 401 to answer.
pub fn caller(st: &OpsState, headers: &HeaderMap) -> Refusable<String> {
    match st.tokens.which(headers) {
        Some(which) => Ok(format!("http:ops-token-{}", which + 1)),
        None => {
            let unauthorized =
                (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or unknown bearer token\n");
            Err(Box::new(unauthorized.into_response()))
        }
    }
}

/// The body as `T`, or the 400 naming `what` was expected and an `example` of it.
pub fn body<T: DeserializeOwned>(bytes: &[u8], what: &str, example: &str) -> Refusable<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Box::new(bad_request(
            Error::config(format!("the request body is not {what}: {e}"))
                .with_fix(format!("send JSON such as {example}")),
        ))
    })
}

/// The 400 for a NUL character in any of `texts` (PostgreSQL text cannot hold one).
pub fn no_nul<'a>(texts: impl IntoIterator<Item = Option<&'a String>>) -> Refusable<()> {
    if texts.into_iter().flatten().any(|t| t.contains('\0')) {
        return Err(Box::new(bad_request(
            Error::config("a name or a text of the request contains a NUL character")
                .with_fix("PostgreSQL text cannot hold NUL; remove it"),
        )));
    }
    Ok(())
}

/// A 400 with `problem` and `fix`.
pub fn invalid(problem: impl Into<String>, fix: impl Into<String>) -> Response {
    bad_request(Error::config(problem).with_fix(fix))
}

/// The answer of an operation: its status and JSON, or the refusal's status.
pub async fn answer<T: Serialize>(operation: impl Future<Output = Result<(StatusCode, T)>>) -> Response {
    let Ok(answer) = tokio::time::timeout(ANSWER_WITHIN, operation).await else {
        let e =
            Error::config(format!("the database did not answer within {}", humantime::format_duration(ANSWER_WITHIN)))
                .with_fix("GET /readyz says whether this dispatcher reaches its database");
        return refusal(StatusCode::SERVICE_UNAVAILABLE, &e);
    };
    match answer {
        Ok((status, value)) => (status, Json(value)).into_response(),
        Err(e @ Error::Refused(_)) if e.to_string().starts_with("no consumer named") => {
            refusal(StatusCode::NOT_FOUND, &e)
        }
        Err(e @ Error::Refused(_)) => refusal(StatusCode::CONFLICT, &e),
        Err(e) => refusal(StatusCode::SERVICE_UNAVAILABLE, &e),
    }
}
