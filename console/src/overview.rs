//! The overview: every consumer × shard (state, lag in events and seconds, attempts, last error),
//! filtered and sorted by query, refreshed live (htmx polls the table every 5 s); and the fence's
//! holder when committed events wait behind it. The same reads as `consumer status`.
use std::collections::HashMap;

use axum::{
    Extension,
    extract::{Query, State},
    response::Html,
};
use highwater_store::{
    doctor::{Finding, Level},
    ops::{self, FenceHolder, ShardStatus},
};
use maud::{Markup, html};

use crate::{Console, auth::Who, error::PageError, page};

/// `?q=` a substring of the consumer's name, `state=`, `sort=` consumer (default), lag, attempts.
type Params = HashMap<String, String>;

async fn rows(st: &Console, p: &Params) -> Result<(Vec<ShardStatus>, Option<FenceHolder>), PageError> {
    let mut rows = ops::status(&st.pool, None).await?;
    st.health.record(&rows);
    let q = p.get("q").map(|s| s.trim()).filter(|s| !s.is_empty());
    let state = p.get("state").map(String::as_str).filter(|s| !s.is_empty());
    rows.retain(|r| q.is_none_or(|q| r.consumer.contains(q)) && state.is_none_or(|s| r.status.as_str() == s));
    match p.get("sort").map(String::as_str) {
        Some("lag") => rows.sort_by(|a, b| b.lag_events.cmp(&a.lag_events).then(a.consumer.cmp(&b.consumer))),
        Some("attempts") => rows.sort_by(|a, b| b.attempts.cmp(&a.attempts).then(a.consumer.cmp(&b.consumer))),
        _ => {}
    }
    // The holder matters only while it holds events back (status names it then); read it once.
    let holder = rows.iter().find_map(|r| r.held_by_fence.clone());
    Ok((rows, holder))
}

fn query_string(p: &Params) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for k in ["q", "state", "sort"] {
        if let Some(v) = p.get(k).filter(|v| !v.is_empty()) {
            s.append_pair(k, v);
        }
    }
    s.finish()
}

fn table(st: &Console, rows: &[ShardStatus], holder: Option<&FenceHolder>, p: &Params) -> Markup {
    let refresh = format!("/overview/table?{}", query_string(p));
    html! {
        div #overview hx-get=(refresh) hx-trigger="every 5s" hx-swap="outerHTML" {
            section.fence aria-label="Fence" {
                @match holder {
                    Some(h) => {
                        strong.warn { "The fence is held back" }
                        " by " (h.to_string()) ", xid " (h.xid.to_string()) "."
                        br;
                        span.muted { "Fix: " (h.fix()) }
                    }
                    None => { span.ok { "The fence holds nothing back." } }
                }
            }
            table {
                caption.muted { (rows.len()) " shards" }
                thead { tr {
                    th scope="col" { "Consumer" } th scope="col" { "Shard" } th scope="col" { "State" }
                    th.num scope="col" { "Lag (events)" } th.num scope="col" { "Lag (age)" }
                    th.num scope="col" { "Held by fence" } th.num scope="col" { "Delivered" }
                    th.num scope="col" { "Rate (events/s)" }
                    th.num scope="col" { "Attempts" } th scope="col" { "Last error" }
                } }
                tbody {
                    @for r in rows {
                        tr {
                            td { a href={ "/consumers/" (r.consumer) } { (r.consumer) } }
                            td { (r.instance_id) }
                            td class={ "state-" (r.status.as_str()) } { (r.status.as_str()) }
                            td.num { (r.lag_events) }
                            td.num { (r.lag_seconds.map(page::seconds).unwrap_or_default()) }
                            td.num { (r.held_events) }
                            td.num { (r.delivered_count) }
                            td.num { (st.health.rate(&r.consumer, &r.instance_id).map(|x| format!("{x:.1}")).unwrap_or_default()) }
                            td.num { (r.attempts) }
                            td {
                                @if let Some(e) = &r.last_error {
                                    pre.error { (e) }
                                    @if let Some(id) = r.failing_event_id { span.muted { "event " (id) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub(crate) async fn page(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    Query(p): Query<Params>,
) -> Result<Html<String>, PageError> {
    let (rows, holder) = rows(&st, &p).await?;
    let get = |k: &str| p.get(k).cloned().unwrap_or_default();
    let body = html! {
        h1 { "Overview" }
        form.filters method="get" action="/" role="search" {
            label { "Consumer contains" input type="search" name="q" value=(get("q")); }
            label { "State"
                select name="state" {
                    option value="" { "any" }
                    @for s in ["idle", "processing", "dead", "disabled"] {
                        option value=(s) selected[get("state") == s] { (s) }
                    }
                }
            }
            label { "Sort by"
                select name="sort" {
                    @for (v, l) in [("consumer", "consumer"), ("lag", "lag"), ("attempts", "attempts")] {
                        option value=(v) selected[get("sort") == v] { (l) }
                    }
                }
            }
            button type="submit" { "Apply" }
        }
        (table(&st, &rows, holder.as_ref(), &p))
        (doctor_section(&st.health.findings(&st.pool).await))
    };
    Ok(page::render("Overview", &who, body))
}

/// The table alone, for the live refresh.
pub(crate) async fn table_fragment(
    State(st): State<Console>,
    Query(p): Query<Params>,
) -> Result<Html<String>, PageError> {
    let (rows, holder) = rows(&st, &p).await?;
    Ok(Html(table(&st, &rows, holder.as_ref(), &p).into_string()))
}

/// `highwater doctor`'s findings that are not ok, each with its fix (at most a minute old).
fn doctor_section(findings: &[Finding]) -> Markup {
    let bad: Vec<&Finding> = findings.iter().filter(|f| f.level != Level::Ok).collect();
    html! {
        section.doctor aria-labelledby="doctor" {
            h2 #doctor { "Doctor" }
            @if bad.is_empty() {
                p.ok { "All " (findings.len()) " checks pass (server, pooler, schema, LISTEN/NOTIFY, fence)." }
            } @else {
                ul { @for f in &bad { li {
                    strong class=(if f.level == Level::Error { "bad" } else { "warn" }) {
                        (if f.level == Level::Error { "Error" } else { "Warning" }) " (" (f.check) ")"
                    }
                    ": " (f.message)
                    @if let Some(fix) = &f.fix { br; span.muted { "Fix: " (fix) } }
                } } }
                p.muted { (findings.len() - bad.len()) " other checks pass." }
            }
        }
    }
}
