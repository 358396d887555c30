//! The dead-letters page: filtered by consumer, type, error text and state, keyset-paginated;
//! each with its payload (pretty JSON, escaped), error, attempts, and who redrove or discarded it
//! and why. The selection or the whole filter goes to the dry run (`actions::preview`).
use std::collections::HashMap;

use axum::{
    Extension,
    extract::{Query, State},
    response::Html,
};
use highwater_store::console::dead_letters::{self, Filter, Key, Row, State as LetterState};
use maud::{Markup, html};

use crate::{Console, auth::Who, error::PageError, page};

const PAGE: i64 = 50;

/// The filter of a query or a form's fields (`consumer`, `type`, `error`, `state`; state `any`
/// for every state, `dead` by default).
pub(crate) fn filter(get: impl Fn(&str) -> Option<String>) -> Filter {
    let state = get("state");
    Filter {
        consumer: get("consumer"),
        event_type: get("type"),
        error_contains: get("error"),
        state: match state.as_deref() {
            Some("any") => None,
            Some(s) => LetterState::parse(s).or(Some(LetterState::Dead)),
            None => Some(LetterState::Dead),
        },
    }
}

/// The filter as hidden fields, so a form acts on what the page shows.
pub(crate) fn hidden_filter(f: &Filter) -> Markup {
    html! {
        @if let Some(c) = &f.consumer { input type="hidden" name="consumer" value=(c); }
        @if let Some(t) = &f.event_type { input type="hidden" name="type" value=(t); }
        @if let Some(e) = &f.error_contains { input type="hidden" name="error" value=(e); }
        input type="hidden" name="state" value=(f.state.map_or("any", LetterState::as_str));
    }
}

pub(crate) fn encode_key(k: &Key) -> String {
    serde_json::to_string(&(&k.consumer, &k.instance_id, k.event_id)).expect("a key serializes")
}

pub(crate) fn decode_key(s: &str) -> Option<Key> {
    let (consumer, instance_id, event_id): (String, String, i64) = serde_json::from_str(s).ok()?;
    Some(Key { consumer, instance_id, event_id })
}

fn payload(r: &Row) -> String {
    match &r.payload {
        Some(p) => serde_json::to_string_pretty(p).unwrap_or_else(|_| p.to_string()),
        None => "(pruned by retention)".to_owned(),
    }
}

fn row(r: &Row, can_act: bool) -> Markup {
    let key = encode_key(&r.key());
    let label = format!("select event {} of {} ({})", r.event_id, r.consumer, r.instance_id);
    html! {
        tr {
            td {
                @if can_act && r.state == "dead" {
                    input type="checkbox" name="key" value=(key) aria-label=(label);
                }
            }
            td.num { (r.event_id) }
            td { a href={ "/consumers/" (r.consumer) } { (r.consumer) } br; span.muted { (r.instance_id) } }
            td {
                (r.event_type.as_deref().unwrap_or("—")) br;
                @if let (Some(t), Some(i)) = (&r.stream_type, &r.stream_id) {
                    a.muted href={ (crate::streams::stream_link(t, i)) "#event-" (r.event_id) } { (t) "/" (i) }
                }
            }
            td { pre.payload tabindex="0" aria-label={ "payload of event " (r.event_id) } { (payload(r)) } }
            td { pre.error { (r.error) } }
            td.num { (r.attempts) }
            td {
                span class={ "state-" (r.state) } { (r.state) }
                @if let Some(by) = &r.redrive_by {
                    br; span.muted { "redrive by " (by) @if let Some(why) = &r.redrive_reason { ": " (why) } }
                }
                @if let Some(by) = &r.discarded_by {
                    br; span.muted { "discarded by " (by) @if let Some(why) = &r.discard_reason { ": " (why) } }
                }
            }
            td { (r.created_at.format("%Y-%m-%d %H:%M:%S UTC")) }
        }
    }
}

pub(crate) async fn page(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Html<String>, PageError> {
    let get = |k: &str| q.get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let f = filter(get);
    let after = get("after").and_then(|a| decode_key(&a));
    let p = dead_letters::page(&st.pool, &f, after.as_ref(), PAGE).await?;
    let can_act = who.user.is_some();
    let next = p.next.as_ref().map(|k| {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (name, v) in [("consumer", &f.consumer), ("type", &f.event_type), ("error", &f.error_contains)] {
            if let Some(v) = v {
                s.append_pair(name, v);
            }
        }
        s.append_pair("state", f.state.map_or("any", LetterState::as_str));
        s.append_pair("after", &encode_key(k));
        format!("/dead-letters?{}", s.finish())
    });
    let state = f.state.map_or("any", LetterState::as_str);
    let body = html! {
        h1 { "Dead letters" }
        form.filters method="get" action="/dead-letters" role="search" {
            label { "Consumer" input type="text" name="consumer" value=(f.consumer.clone().unwrap_or_default()); }
            label { "Event type" input type="text" name="type" value=(f.event_type.clone().unwrap_or_default()); }
            label { "Error contains" input type="search" name="error" value=(f.error_contains.clone().unwrap_or_default()); }
            label { "State"
                select name="state" {
                    @for s in ["dead", "pending", "redriven", "discarded", "any"] {
                        option value=(s) selected[state == s] { (s) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        form method="post" action="/dead-letters/preview" {
            input type="hidden" name="csrf" value=(who.csrf);
            (hidden_filter(&f))
            @if can_act {
                fieldset.actions {
                    legend.muted { "Act on the selected rows or on every dead letter the filter matches (a dry run comes first)" }
                    label { "Reason" input type="text" name="reason" placeholder="why (recorded with the change)"; }
                    button.primary type="submit" name="do" value="redrive-selection" { "Redrive selected" }
                    button.danger type="submit" name="do" value="discard-selection" { "Discard selected" }
                    button type="submit" name="do" value="redrive-filter" { "Redrive the whole filter" }
                    button.danger type="submit" name="do" value="discard-filter" { "Discard the whole filter" }
                }
            }
            table {
                caption.muted { (p.rows.len()) " on this page" @if p.next.is_some() { ", more after" } }
                thead { tr {
                    th scope="col" { span.muted { "Select" } } th.num scope="col" { "Event" } th scope="col" { "Consumer" }
                    th scope="col" { "Type / stream" } th scope="col" { "Payload" } th scope="col" { "Error" }
                    th.num scope="col" { "Attempts" } th scope="col" { "State" } th scope="col" { "Since" }
                } }
                tbody { @for r in &p.rows { (row(r, can_act)) } }
            }
        }
        @if p.stopped_early {
            p.notice role="status" {
                "This page looked at " (dead_letters::SCAN) " dead letters in key order and found " (p.rows.len())
                " that match; “Next page” goes on searching after them."
            }
        } @else if p.rows.is_empty() { p.muted { "No dead letters match." } }
        @if let Some(n) = next { p.pager { a href=(n) rel="next" { "Next page →" } } }
    };
    Ok(page::render("Dead letters", &who, body))
}
