//! `POST /v1/consumers/{name}/discard`: `consumer discard` over HTTP (docs/consumers.md,
//! "Per-stream order"), beside the redrive endpoint and with its tokens (`HIGHWATER_OPS_TOKENS`):
//! a discard drops an event from a consumer, at least as much power as a redrive. Without ops
//! tokens configured every request is a 401. 200 with what was discarded and released; 400 bad
//! input, 401 no token, 404 unknown consumer, 409 not an open dead letter that may be discarded,
//! 503 database down.
use axum::{
    Json,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::json;

use crate::{Error, ops::discard, redrive_http::OpsState};

/// How long a request may take before it is a 503.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    event: i64,
    reason: String,
    instance: Option<String>,
}

fn refusal(status: StatusCode, e: &Error) -> Response {
    (status, Json(json!({"error": e.to_string()}))).into_response()
}

pub async fn discard_handler(
    State(st): State<OpsState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(which) = st.tokens.which(&headers) else {
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or unknown bearer token\n")
            .into_response();
    };
    let b: Body = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            let e = Error::config(format!("the request body is not a discard request: {e}"))
                .with_fix("send JSON such as {\"event\": 4711, \"reason\": \"cannot be fixed\"}");
            return refusal(StatusCode::BAD_REQUEST, &e);
        }
    };
    if [Some(&name), Some(&b.reason), b.instance.as_ref()].into_iter().flatten().any(|t| t.contains('\0')) {
        let e = Error::config("a name or a text of the request contains a NUL character")
            .with_fix("PostgreSQL text cannot hold NUL; remove it");
        return refusal(StatusCode::BAD_REQUEST, &e);
    }
    if b.reason.trim().is_empty() {
        let e = Error::config("a discard needs a reason: the event is never delivered to the consumer")
            .with_fix("say why in \"reason\"");
        return refusal(StatusCode::BAD_REQUEST, &e);
    }
    let request = discard::Request {
        consumer: name,
        event: b.event,
        instance: b.instance,
        by: format!("http:ops-token-{}", which + 1),
        reason: b.reason,
    };
    let Ok(answer) = tokio::time::timeout(ANSWER_WITHIN, discard::discard(&st.pool, &request)).await else {
        let e =
            Error::config(format!("the database did not answer within {}", humantime::format_duration(ANSWER_WITHIN)))
                .with_fix("GET /readyz says whether this dispatcher reaches its database");
        return refusal(StatusCode::SERVICE_UNAVAILABLE, &e);
    };
    match answer {
        Ok(d) => (StatusCode::OK, Json(d)).into_response(),
        Err(e @ Error::Refused(_)) if e.to_string().starts_with("no consumer named") => {
            refusal(StatusCode::NOT_FOUND, &e)
        }
        Err(e @ Error::Refused(_)) => refusal(StatusCode::CONFLICT, &e),
        Err(e) => refusal(StatusCode::SERVICE_UNAVAILABLE, &e),
    }
}
