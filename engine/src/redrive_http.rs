//! `POST /v1/consumers/{name}/redrive`: `consumer redrive` over HTTP (docs/consumers.md,
//! "Redrive"); `POST /v1/consumers/{name}/replay`: `consumer replay` over HTTP ("Replay"), with
//! the same tokens and answers. A bearer token as for the wait, but from its own list (`HIGHWATER_OPS_TOKENS`,
//! `--ops-tokens-file`): a token that may read streams or wait must not be able to redeliver.
//! Without ops tokens configured every request is a 401. The body selects dead letters as the
//! CLI's flags do; the answer is the plan: 202 when requested (a dispatcher delivers them), 200
//! for a dry run; 400 bad input, 401 no token, 404 unknown consumer, 409 a selection that does not
//! apply (not a dead letter, pruned, pending already, nothing matches, more than 100 without
//! `yes`), 503 database down.
use axum::{
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::Response,
};
use chrono::{DateTime, Utc};
use highwater_store::pg::PgPool;
use serde::Deserialize;

use crate::{ops_http, sse::Tokens};
use highwater_store::{
    Error,
    ops::{
        redrive::{self, CONFIRM_ABOVE as REDRIVE_CONFIRM_ABOVE},
        replay,
    },
};

#[derive(Clone)]
pub struct OpsState {
    pub tokens: Tokens,
    pub pool: PgPool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    event: Option<i64>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    error_contains: Option<String>,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    #[serde(default)]
    all: bool,
    instance: Option<String>,
    reason: Option<String>,
    rate: Option<f64>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    yes: bool,
}

pub async fn redrive_handler(
    State(st): State<OpsState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let by = match ops_http::caller(&st, &headers) {
        Ok(by) => by,
        Err(r) => return *r,
    };
    let example = r#"{"event": 4711, "reason": "fixed"} or {"all": true}"#;
    let b: Body = match ops_http::body(&body, "a redrive selection", example) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let texts = [Some(&name), b.event_type.as_ref(), b.error_contains.as_ref(), b.instance.as_ref(), b.reason.as_ref()];
    if let Err(r) = ops_http::no_nul(texts) {
        return *r;
    }
    let none = !b.all && b.event.is_none() && b.event_type.is_none() && b.error_contains.is_none();
    if none && b.since.is_none() && b.until.is_none() {
        return ops_http::invalid(
            "a redrive needs a selection of dead letters",
            "name them: event, type, errorContains, since/until, or all: true",
        );
    }
    if let Some(r) = b.rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
        return ops_http::invalid(
            format!("rate {r} is not a positive number of deliveries per second"),
            "e.g. \"rate\": 10",
        );
    }
    let selection = redrive::Selection {
        consumer: name,
        instance: b.instance,
        event: b.event,
        event_type: b.event_type,
        error_contains: b.error_contains,
        since: b.since,
        until: b.until,
        all: b.all,
    };
    let mut request = redrive::Request { selection, by, reason: b.reason, rate: b.rate, dry_run: true };
    let answer = async {
        let preview = redrive::redrive(&st.pool, &request).await?;
        if b.dry_run {
            return Ok((StatusCode::OK, preview));
        }
        if preview.selected.len() > REDRIVE_CONFIRM_ABOVE && !b.yes {
            return Err(Error::refused(format!(
                "redrive {} dead letters of consumer {}: more than {REDRIVE_CONFIRM_ABOVE} need a confirmation",
                preview.selected.len(),
                preview.consumer
            ))
            .with_fix("check them with \"dryRun\": true, then send \"yes\": true"));
        }
        request.dry_run = false;
        Ok((StatusCode::ACCEPTED, redrive::redrive(&st.pool, &request).await?))
    };
    ops_http::answer(answer).await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReplayBody {
    stream: String,
    since: Option<i64>,
    reason: Option<String>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    yes: bool,
}

pub async fn replay_handler(
    State(st): State<OpsState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let by = match ops_http::caller(&st, &headers) {
        Ok(by) => by,
        Err(r) => return *r,
    };
    let example = r#"{"stream": "order/o-17", "reason": "row rebuilt"}"#;
    let b: ReplayBody = match ops_http::body(&body, "a replay request", example) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    if let Err(r) = ops_http::no_nul([Some(&name), Some(&b.stream), b.reason.as_ref()]) {
        return *r;
    }
    if let Err(e) = replay::parse_stream(&b.stream) {
        let problem = e.to_string().replace("--stream", "stream").lines().next().unwrap_or_default().to_owned();
        return ops_http::invalid(problem, "e.g. \"stream\": \"order/o-17\"");
    }
    let mut request =
        replay::Request { consumer: name, stream: b.stream, since: b.since, by, reason: b.reason, dry_run: true };
    let answer = async {
        let preview = replay::replay(&st.pool, &request).await?;
        if b.dry_run {
            return Ok((StatusCode::OK, preview));
        }
        if preview.selected.len() > REDRIVE_CONFIRM_ABOVE && !b.yes {
            return Err(Error::refused(format!(
                "replay {} events of stream {} to consumer {}: more than {REDRIVE_CONFIRM_ABOVE} need a confirmation",
                preview.selected.len(),
                preview.stream,
                preview.consumer
            ))
            .with_fix("check them with \"dryRun\": true, then send \"yes\": true"));
        }
        request.dry_run = false;
        Ok((StatusCode::ACCEPTED, replay::replay(&st.pool, &request).await?))
    };
    ops_http::answer(answer).await
}
