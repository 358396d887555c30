//! `POST /v1/consumers/{name}/discard`: `consumer discard` over HTTP (docs/consumers.md,
//! "Per-stream order"), beside the redrive endpoint and with its tokens (`HIGHWATER_OPS_TOKENS`):
//! a discard drops an event from a consumer, at least as much power as a redrive. Without ops
//! tokens configured every request is a 401. 200 with what was discarded and released; 400 bad
//! input, 401 no token, 404 unknown consumer, 409 not an open dead letter that may be discarded,
//! 503 database down.
use axum::{
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::Response,
};
use serde::Deserialize;

use crate::{ops_http, redrive_http::OpsState};
use highwater_store::ops::discard;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    event: i64,
    reason: String,
    instance: Option<String>,
}

pub async fn discard_handler(
    State(st): State<OpsState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let by = match ops_http::caller(&st, &headers) {
        Ok(by) => by,
        Err(r) => return *r,
    };
    let b: Body = match ops_http::body(&body, "a discard request", r#"{"event": 4711, "reason": "cannot be fixed"}"#) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    if let Err(r) = ops_http::no_nul([Some(&name), Some(&b.reason), b.instance.as_ref()]) {
        return *r;
    }
    if b.reason.trim().is_empty() {
        return ops_http::invalid(
            "a discard needs a reason: the event is never delivered to the consumer",
            "say why in \"reason\"",
        );
    }
    let request = discard::Request { consumer: name, event: b.event, instance: b.instance, by, reason: b.reason };
    ops_http::answer(async { Ok((StatusCode::OK, discard::discard(&st.pool, &request).await?)) }).await
}
