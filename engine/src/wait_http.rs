//! `GET /v1/consumers/{name}/applied?after=TOKEN&timeout=5s[&instance=ID]`: the read-your-writes
//! wait as an HTTP long poll, for services in any language. Same bearer tokens as the SSE
//! streams. 200 when applied, 408 on timeout, 400 bad input, 404 unknown consumer, 401 no token.
use axum::{
    Json,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::json;

use crate::{
    sse::SseState,
    wait::{self, RefusedBecause, Waited},
};
use highwater_store::{Error, applied::Token};

/// The timeout when the request names none.
const DEFAULT_TIMEOUT: &str = "5s";
/// How long past its timeout a wait may take to answer before it is a 503.
const ANSWER_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Deserialize)]
pub struct AppliedQuery {
    after: Option<String>,
    timeout: Option<String>,
    instance: Option<String>,
}

fn refusal(status: StatusCode, e: &Error) -> Response {
    (status, Json(json!({"applied": false, "error": e.to_string()}))).into_response()
}

pub async fn applied_handler(
    State(st): State<SseState>,
    Path(name): Path<String>,
    Query(q): Query<AppliedQuery>,
    headers: HeaderMap,
) -> Response {
    if !st.tokens.allows(&headers) {
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or unknown bearer token\n")
            .into_response();
    }
    // PostgreSQL text cannot hold NUL: such a name would fail the hub's one statement for every
    // waiter (a 503 for input no consumer can have).
    if name.contains('\0') || q.instance.as_deref().is_some_and(|i| i.contains('\0')) {
        let e = Error::config("the consumer name or the instance contains a NUL character")
            .with_fix("pass the name as `highwater consumer list` shows it");
        return refusal(StatusCode::BAD_REQUEST, &e);
    }
    let Some(after) = q.after.as_deref() else {
        let e = Error::config("the query parameter `after` is missing")
            .with_fix("pass the token of your write: ?after=TOKEN (highwater.token() in SQL)");
        return refusal(StatusCode::BAD_REQUEST, &e);
    };
    let token: Token = match after.parse() {
        Ok(t) => t,
        Err(e) => return refusal(StatusCode::BAD_REQUEST, &e),
    };
    let timeout = match wait::parse_timeout(q.timeout.as_deref().unwrap_or(DEFAULT_TIMEOUT)) {
        Ok(t) => t,
        Err(e) => return refusal(StatusCode::BAD_REQUEST, &e),
    };
    // Past the timeout and a moment to explain what is pending, the database is not answering:
    // a 503 then, not a request hanging on the pool's connection attempts.
    let hub = wait::hub(&st.pool);
    let wait = hub.wait(&name, q.instance.as_deref(), token, timeout);
    let Ok(waited) = tokio::time::timeout(timeout + ANSWER_GRACE, wait).await else {
        let e = Error::config(format!(
            "the database did not answer within {}",
            humantime::format_duration(timeout + ANSWER_GRACE)
        ))
        .with_fix("GET /readyz says whether this dispatcher reaches its database");
        return refusal(StatusCode::SERVICE_UNAVAILABLE, &e);
    };
    match waited {
        Ok(Waited::Applied) => {
            (StatusCode::OK, Json(json!({"consumer": name, "after": token, "applied": true}))).into_response()
        }
        Ok(Waited::TimedOut { pending }) => (
            StatusCode::REQUEST_TIMEOUT,
            Json(json!({"consumer": name, "after": token, "applied": false, "pending": pending})),
        )
            .into_response(),
        Err(e) => match wait::refused_because(&e) {
            Some(RefusedBecause::UnknownConsumer) => refusal(StatusCode::NOT_FOUND, &e),
            Some(RefusedBecause::BadRequest) => refusal(StatusCode::BAD_REQUEST, &e),
            None => refusal(StatusCode::SERVICE_UNAVAILABLE, &e),
        },
    }
}
