//! `POST /v1/consumers/{name}/discard`: `consumer discard` over HTTP (docs/consumers.md,
//! "Per-stream order"), beside the redrive endpoint and with its tokens (`HIGHWATER_OPS_TOKENS`):
//! a discard drops an event from a consumer, at least as much power as a redrive. Without ops
//! tokens configured every request is a 401. 200 with what was discarded and released; 400 bad
//! input, 401 no token, 404 unknown consumer, 409 not an open dead letter that may be discarded,
//! 503 database down. The request is its own confirmation (the body names the event and why).
use axum::{
    Extension,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};
use highwater_ops::{Audit, Confirm, Discard, Error, Result, run};
use serde::Deserialize;

use crate::{
    ops_http::{self, Caller},
    redrive_http::OpsState,
};

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
    Extension(Caller(by)): Extension<Caller>,
    body: Bytes,
) -> Result<Response> {
    let b: Body = ops_http::body(&body, "a discard request", r#"{"event": 4711, "reason": "cannot be fixed"}"#)?;
    ops_http::no_nul([Some(&name), Some(&b.reason), b.instance.as_ref()])?;
    if b.reason.trim().is_empty() {
        return Err(Error::invalid(
            "a discard needs a reason: the event is never delivered to the consumer",
            "say why in \"reason\"",
        ));
    }
    let op = Discard { consumer: name, event: b.event, instance: b.instance };
    let audit = Audit { by, reason: Some(b.reason) };
    ops_http::answer(StatusCode::OK, run(&op, &st.pool, &audit, false, Confirm::Given)).await
}
