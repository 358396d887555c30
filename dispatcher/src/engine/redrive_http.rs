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
    Json,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;
use sqlx::PgPool;

use crate::{
    Error,
    ops::{
        redrive::{self, CONFIRM_ABOVE as REDRIVE_CONFIRM_ABOVE},
        replay,
    },
    sse::Tokens,
};

/// How long a request may take before it is a 503.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

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

fn refusal(status: StatusCode, e: &Error) -> Response {
    (status, Json(json!({"error": e.to_string()}))).into_response()
}

pub async fn redrive_handler(
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
            let e = Error::config(format!("the request body is not a redrive selection: {e}"))
                .with_fix("send JSON such as {\"event\": 4711, \"reason\": \"fixed\"} or {\"all\": true}");
            return refusal(StatusCode::BAD_REQUEST, &e);
        }
    };
    let texts = [Some(&name), b.event_type.as_ref(), b.error_contains.as_ref(), b.instance.as_ref(), b.reason.as_ref()];
    if texts.into_iter().flatten().any(|t| t.contains('\0')) {
        let e = Error::config("a name or a text of the request contains a NUL character")
            .with_fix("PostgreSQL text cannot hold NUL; remove it");
        return refusal(StatusCode::BAD_REQUEST, &e);
    }
    let none = !b.all && b.event.is_none() && b.event_type.is_none() && b.error_contains.is_none();
    if none && b.since.is_none() && b.until.is_none() {
        let e = Error::config("a redrive needs a selection of dead letters")
            .with_fix("name them: event, type, errorContains, since/until, or all: true");
        return refusal(StatusCode::BAD_REQUEST, &e);
    }
    if let Some(r) = b.rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
        let e = Error::config(format!("rate {r} is not a positive number of deliveries per second"))
            .with_fix("e.g. \"rate\": 10");
        return refusal(StatusCode::BAD_REQUEST, &e);
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
    let mut request = redrive::Request {
        selection,
        by: format!("http:ops-token-{}", which + 1),
        reason: b.reason,
        rate: b.rate,
        dry_run: true,
    };
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
    // A database that does not answer: a 503, not a request hanging on the pool's connection
    // attempts.
    let Ok(answer) = tokio::time::timeout(ANSWER_WITHIN, answer).await else {
        let e =
            Error::config(format!("the database did not answer within {}", humantime::format_duration(ANSWER_WITHIN)))
                .with_fix("GET /readyz says whether this dispatcher reaches its database");
        return refusal(StatusCode::SERVICE_UNAVAILABLE, &e);
    };
    match answer {
        Ok((status, plan)) => (status, Json(plan)).into_response(),
        Err(e @ Error::Refused(_)) if e.to_string().starts_with("no consumer named") => {
            refusal(StatusCode::NOT_FOUND, &e)
        }
        Err(e @ Error::Refused(_)) => refusal(StatusCode::CONFLICT, &e),
        Err(e) => refusal(StatusCode::SERVICE_UNAVAILABLE, &e),
    }
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
    let Some(which) = st.tokens.which(&headers) else {
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or unknown bearer token\n")
            .into_response();
    };
    let b: ReplayBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            let e = Error::config(format!("the request body is not a replay request: {e}"))
                .with_fix("send JSON such as {\"stream\": \"order/o-17\", \"reason\": \"row rebuilt\"}");
            return refusal(StatusCode::BAD_REQUEST, &e);
        }
    };
    if [Some(&name), Some(&b.stream), b.reason.as_ref()].into_iter().flatten().any(|t| t.contains('\0')) {
        let e = Error::config("a name or a text of the request contains a NUL character")
            .with_fix("PostgreSQL text cannot hold NUL; remove it");
        return refusal(StatusCode::BAD_REQUEST, &e);
    }
    if let Err(e) = replay::parse_stream(&b.stream) {
        let e =
            Error::config(e.to_string().replace("--stream", "stream").lines().next().unwrap_or_default().to_owned())
                .with_fix("e.g. \"stream\": \"order/o-17\"");
        return refusal(StatusCode::BAD_REQUEST, &e);
    }
    let mut request = replay::Request {
        consumer: name,
        stream: b.stream,
        since: b.since,
        by: format!("http:ops-token-{}", which + 1),
        reason: b.reason,
        dry_run: true,
    };
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
    let Ok(answer) = tokio::time::timeout(ANSWER_WITHIN, answer).await else {
        let e =
            Error::config(format!("the database did not answer within {}", humantime::format_duration(ANSWER_WITHIN)))
                .with_fix("GET /readyz says whether this dispatcher reaches its database");
        return refusal(StatusCode::SERVICE_UNAVAILABLE, &e);
    };
    match answer {
        Ok((status, plan)) => (status, Json(plan)).into_response(),
        Err(e @ Error::Refused(_)) if e.to_string().starts_with("no consumer named") => {
            refusal(StatusCode::NOT_FOUND, &e)
        }
        Err(e @ Error::Refused(_)) => refusal(StatusCode::CONFLICT, &e),
        Err(e) => refusal(StatusCode::SERVICE_UNAVAILABLE, &e),
    }
}
