//! One stream's events in delivery order (`highwater events read`), as of a time or up to a
//! version; each payload as stored and, when its type has later versions, as upcast to the latest
//! (what a consumer with `eventVersions: latest` is delivered). A causation id links to the event
//! that caused it, a correlation id to the other events of that correlation.
use std::collections::HashMap;

use axum::{
    Extension,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{Html, IntoResponse, Redirect, Response},
};
use chrono::{DateTime, Utc};
use highwater_store::{
    Event,
    console::events,
    events::{StreamRead, read_stream},
};
use maud::{Markup, html};

use crate::{Console, auth::Who, error::PageError, page};

/// A stream page shows at most this many events (the newest are cut, with a note).
const MAX_EVENTS: usize = 500;
/// The correlation page looks at the newest this many events (no index covers the metadata key).
const CORRELATION_SCAN: i64 = 100_000;

type Params = HashMap<String, String>;

pub(crate) fn stream_link(stream_type: &str, stream_id: &str) -> String {
    let q = form_urlencoded::Serializer::new(String::new())
        .append_pair("type", stream_type)
        .append_pair("id", stream_id)
        .finish();
    format!("/streams?{q}")
}

fn pretty(b: &highwater_store::Body) -> String {
    serde_json::to_string_pretty(&b.to_value()).unwrap_or_else(|_| b.get().to_owned())
}

fn links(e: &Event) -> Markup {
    let [corr, cause] = e.metadata.str_fields(["correlation_id", "causation_id"]);
    html! {
        @if let Some(c) = corr {
            "correlation " a href={ "/correlations/" (form_urlencoded::byte_serialize(c.as_bytes()).collect::<String>()) } { (c) }
            br;
        }
        @if let Some(c) = cause.filter(|c| c.parse::<i64>().is_ok()) {
            "caused by " a href={ "/events/" (c) } { "event " (c) }
        }
    }
}

fn event_row(e: &Event, upcast: Option<&Event>) -> Markup {
    let stored = pretty(&e.payload);
    let latest = upcast.map(|u| pretty(&u.payload)).filter(|u| *u != stored);
    html! {
        tr id={ "event-" (e.id) } {
            td.num { (e.id) }
            td.num { (e.stream_version.map(|v| v.to_string()).unwrap_or_default()) }
            td { (e.event_type) }
            td { (e.created_at.format("%Y-%m-%d %H:%M:%S%.3f UTC")) }
            td {
                pre.payload tabindex="0" aria-label={ "payload of event " (e.id) } { (stored) }
                @if let Some(l) = latest { p.muted { "Upcast to the latest version:" } pre.payload.upcast tabindex="0" aria-label={ "payload of event " (e.id) ", upcast" } { (l) } }
            }
            td { (links(e)) }
        }
    }
}

fn events_table(events: &[Event], upcast: &HashMap<i64, Event>) -> Markup {
    html! {
        table {
            caption.muted { (events.len()) " events" }
            thead { tr {
                th.num scope="col" { "Event" } th.num scope="col" { "Version" } th scope="col" { "Type" }
                th scope="col" { "Created" } th scope="col" { "Payload" } th scope="col" { "Correlation, causation" }
            } }
            tbody { @for e in events { (event_row(e, upcast.get(&e.id))) } }
        }
    }
}

pub(crate) async fn page(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    Query(p): Query<Params>,
) -> Result<Html<String>, PageError> {
    let get = |k: &str| p.get(k).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
    let bad = |m: String| PageError::new(StatusCode::BAD_REQUEST, m);
    let as_of = match get("as_of") {
        None => None,
        Some(t) => Some(
            DateTime::parse_from_rfc3339(&t)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| bad(format!("as of {t:?}: not an RFC 3339 time; e.g. 2026-01-31T12:00:00Z")))?,
        ),
    };
    let to_version = match get("to_version") {
        None => None,
        Some(v) => Some(v.parse::<i64>().map_err(|_| bad(format!("up to version {v:?}: not a number")))?),
    };
    let form = html! {
        form.filters method="get" action="/streams" role="search" {
            label { "Stream type" input type="text" name="type" required value=(get("type").unwrap_or_default()); }
            label { "Stream id" input type="text" name="id" required value=(get("id").unwrap_or_default()); }
            label { "As of (RFC 3339)" input type="text" name="as_of" value=(get("as_of").unwrap_or_default()); }
            label { "Up to version" input type="text" name="to_version" inputmode="numeric" value=(get("to_version").unwrap_or_default()); }
            button type="submit" { "Read" }
        }
    };
    let (Some(stream_type), Some(stream_id)) = (get("type"), get("id")) else {
        let body = html! {
            h1 { "Streams" }
            p.muted { "One stream's events in delivery order, as `highwater events read --stream TYPE/ID` prints them." }
            (form)
        };
        return Ok(page::render("Streams", &who, body));
    };
    let mut r =
        StreamRead { stream_type: stream_type.clone(), stream_id: stream_id.clone(), as_of, to_version, latest: false };
    let mut stored = read_stream(&st.pool, &r).await?;
    r.latest = true;
    let upcast: HashMap<i64, Event> = read_stream(&st.pool, &r).await?.into_iter().map(|e| (e.id, e)).collect();
    let total = stored.len();
    stored.truncate(MAX_EVENTS);
    let body = html! {
        h1 { "Stream " (stream_type) "/" (stream_id) }
        (form)
        @if total > MAX_EVENTS {
            p.notice { "The first " (MAX_EVENTS) " of " (total) " events; narrow it with “as of” or “up to version”." }
        }
        (events_table(&stored, &upcast))
    };
    Ok(page::render(&format!("Stream {stream_type}/{stream_id}"), &who, body))
}

/// A causation id's link: the event's place in its stream.
pub(crate) async fn event(State(st): State<Console>, Path(id): Path<i64>) -> Result<Response, PageError> {
    match events::by_id(&st.pool, id).await? {
        Some(e) => {
            Ok(Redirect::to(&format!("{}#event-{id}", stream_link(&e.stream_type, &e.stream_id))).into_response())
        }
        None => Err(PageError::new(
            StatusCode::NOT_FOUND,
            format!("no event {id}: never appended, its transaction has not committed, or pruned by retention"),
        )),
    }
}

/// The events of one correlation id, newest first, among the newest events.
pub(crate) async fn correlation(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    Path(id): Path<String>,
) -> Result<Html<String>, PageError> {
    let found = events::by_correlation(&st.pool, &id, MAX_EVENTS as i64, CORRELATION_SCAN).await?;
    let body = html! {
        h1 { "Correlation " (id) }
        p.muted { "Its events among the newest " (CORRELATION_SCAN) " events, newest first, with their streams." }
        table {
            thead { tr { th.num scope="col" { "Event" } th scope="col" { "Stream" } th scope="col" { "Type" } th scope="col" { "Created" } th scope="col" { "Caused by" } } }
            tbody { @for e in &found { tr {
                td.num { (e.id) }
                td { a href={ (stream_link(&e.stream_type, &e.stream_id)) "#event-" (e.id) } { (e.stream_type) "/" (e.stream_id) } }
                td { (e.event_type) }
                td { (e.created_at.format("%Y-%m-%d %H:%M:%S%.3f UTC")) }
                td { @if let Some(c) = e.metadata.str_field("causation_id") { a href={ "/events/" (c) } { "event " (c) } } }
            } } }
        }
        @if found.is_empty() { p.muted { "No event of this correlation among them." } }
    };
    Ok(page::render(&format!("Correlation {id}"), &who, body))
}
