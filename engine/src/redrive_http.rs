//! `POST /v1/consumers/{name}/redrive`: `consumer redrive` over HTTP (docs/consumers.md,
//! "Redrive"); `POST /v1/consumers/{name}/replay`: `consumer replay` over HTTP ("Replay"), with
//! the same tokens and answers. A bearer token as for the wait, but from its own list (`HIGHWATER_OPS_TOKENS`,
//! `--ops-tokens-file`): a token that may read streams or wait must not be able to redeliver.
//! Without ops tokens configured every request is a 401. The body selects dead letters as the
//! CLI's flags do; the answer is the plan: 202 when requested (a dispatcher delivers them), 200
//! for a dry run; 400 bad input, 401 no token, 404 unknown consumer, 409 a selection that does not
//! apply (not a dead letter, pruned, pending already, nothing matches, more than 100 without
//! `yes`), 503 database down. The flow is `highwater_ops::run`'s, as for the CLI.
use axum::{
    Extension,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};
use chrono::{DateTime, Utc};
use highwater_ops::{Audit, Confirm, Error, Redrive, Replay, Result, redrive_rows::Selection, run};
use highwater_store::pg::PgPool;
use serde::Deserialize;

use crate::{
    ops_http::{self, Caller},
    sse::Tokens,
};

#[derive(Clone)]
pub struct OpsState {
    pub tokens: Tokens,
    pub pool: PgPool,
}

/// A request over `"yes": true`'s threshold without it.
const CONFIRM: Confirm<'static> = Confirm::Refuse { fix: "check them with \"dryRun\": true, then send \"yes\": true" };

fn confirm(yes: bool) -> Confirm<'static> {
    if yes { Confirm::Given } else { CONFIRM }
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
    Extension(Caller(by)): Extension<Caller>,
    body: Bytes,
) -> Result<Response> {
    let example = r#"{"event": 4711, "reason": "fixed"} or {"all": true}"#;
    let b: Body = ops_http::body(&body, "a redrive selection", example)?;
    let texts = [Some(&name), b.event_type.as_ref(), b.error_contains.as_ref(), b.instance.as_ref(), b.reason.as_ref()];
    ops_http::no_nul(texts)?;
    let none = !b.all && b.event.is_none() && b.event_type.is_none() && b.error_contains.is_none();
    if none && b.since.is_none() && b.until.is_none() {
        return Err(Error::invalid(
            "a redrive needs a selection of dead letters",
            "name them: event, type, errorContains, since/until, or all: true",
        ));
    }
    if let Some(r) = b.rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
        return Err(Error::invalid(
            format!("rate {r} is not a positive number of deliveries per second"),
            "e.g. \"rate\": 10",
        ));
    }
    let selection = Selection {
        consumer: name,
        instance: b.instance,
        event: b.event,
        event_type: b.event_type,
        error_contains: b.error_contains,
        since: b.since,
        until: b.until,
        all: b.all,
    };
    let op = Redrive { selection, rate: b.rate };
    let audit = Audit { by, reason: b.reason };
    ops_http::answer(StatusCode::ACCEPTED, run(&op, &st.pool, &audit, b.dry_run, confirm(b.yes))).await
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
    Extension(Caller(by)): Extension<Caller>,
    body: Bytes,
) -> Result<Response> {
    let example = r#"{"stream": "order/o-17", "reason": "row rebuilt"}"#;
    let b: ReplayBody = ops_http::body(&body, "a replay request", example)?;
    ops_http::no_nul([Some(&name), Some(&b.stream), b.reason.as_ref()])?;
    if let Err(e) = highwater_ops::replay_rows::parse_stream(&b.stream) {
        let problem = e.to_string().replace("--stream", "stream").lines().next().unwrap_or_default().to_owned();
        return Err(Error::invalid(problem, "e.g. \"stream\": \"order/o-17\""));
    }
    let op = Replay { consumer: name, stream: b.stream, since: b.since };
    let audit = Audit { by, reason: b.reason };
    ops_http::answer(StatusCode::ACCEPTED, run(&op, &st.pool, &audit, b.dry_run, confirm(b.yes))).await
}
