//! One consumer: its shards and cursors (state, lag, attempts, last error) and its latest dead
//! letters. Its spec is not shown yet: a webhook secret or a broker password must never reach the
//! browser, and masking them is the next step (docs/console.md, "Not yet").
use axum::{
    Extension,
    extract::{Path, State},
    response::Html,
};
use highwater_store::{
    Error,
    console::dead_letters::{self, Filter},
    ops,
};
use maud::html;

use crate::{Console, auth::Who, error::PageError, page};

pub(crate) async fn page(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    Path(name): Path<String>,
) -> Result<Html<String>, PageError> {
    let shards = ops::status(&st.pool, Some(&name)).await?;
    let f = Filter { consumer: Some(name.clone()), ..Filter::default() };
    let recent = dead_letters::page(&st.pool, &f, None, 10).await?;
    if shards.is_empty() && recent.rows.is_empty() {
        return Err(Error::no_consumer(&name).into());
    }
    let link = {
        let mut s = form_urlencoded::Serializer::new(String::from("/dead-letters?"));
        s.append_pair("consumer", &name);
        s.finish()
    };
    let body = html! {
        h1 { "Consumer " (name) }
        h2 { "Shards and cursors" }
        table {
            thead { tr {
                th scope="col" { "Shard" } th scope="col" { "State" } th scope="col" { "Cursor (xid, event)" }
                th.num scope="col" { "Lag (events)" } th.num scope="col" { "Lag (age)" } th.num scope="col" { "Attempts" }
                th scope="col" { "Last error" } th scope="col" { "Next attempt" }
            } }
            tbody { @for r in &shards { tr {
                td { (r.instance_id) }
                td class={ "state-" (r.status.as_str()) } { (r.status.as_str()) }
                td { (r.cursor_tx.to_string()) ", " (r.cursor_event_id) }
                td.num { (r.lag_events) }
                td.num { (r.lag_seconds.map(page::seconds).unwrap_or_default()) }
                td.num { (r.attempts) }
                td { @if let Some(e) = &r.last_error { pre.error { (e) } } }
                td { @if let Some(t) = r.next_attempt_at { (t.format("%H:%M:%S UTC")) } }
            } } }
        }
        h2 { "Latest dead letters" }
        @if recent.rows.is_empty() { p.muted { "None dead." } }
        ul { @for d in &recent.rows {
            li { "event " (d.event_id) " (" (d.event_type.as_deref().unwrap_or("pruned")) "): " span.bad { (d.error) } }
        } }
        p { a href=(link) { "All of its dead letters" } }
    };
    Ok(page::render(&format!("Consumer {name}"), &who, body))
}
