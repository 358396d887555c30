//! One consumer: its spec (secrets masked, `mask.rs`), its shards and cursors (state, lag,
//! attempts, last error), who changed its shards lately and why, its latest dead letters, and, for
//! a console user, the actions restart, skip, disable, enable, rewind and rebuild
//! (`shard_actions.rs`).
use axum::{
    Extension,
    extract::{Path, State},
    response::Html,
};
use highwater_store::{
    Error,
    console::{
        consumer,
        dead_letters::{self, Filter},
    },
    ops::{self, ShardStatus},
};
use maud::{Markup, html};

use crate::{Console, auth::Who, error::PageError, page};

pub(crate) async fn page(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    Path(name): Path<String>,
) -> Result<Html<String>, PageError> {
    let stored = consumer::definition(&st.pool, &name).await?;
    let shards = ops::status(&st.pool, Some(&name)).await?;
    st.health.record(&shards);
    let f = Filter { consumer: Some(name.clone()), ..Filter::default() };
    let recent = dead_letters::page(&st.pool, &f, None, 10).await?;
    let changes = ops::shard_changes(&st.pool, &name, 10).await?;
    if stored.is_none() && shards.is_empty() && recent.rows.is_empty() && changes.is_empty() {
        return Err(Error::no_consumer(&name).into());
    }
    let link = format!(
        "/dead-letters?{}",
        form_urlencoded::Serializer::new(String::new()).append_pair("consumer", &name).finish()
    );
    let spec = stored.as_ref().map(|d| {
        let mut v = serde_json::to_value(&d.spec).unwrap_or_default();
        crate::mask::mask(&mut v);
        (serde_json::to_string_pretty(&v).unwrap_or_default(), d.source.clone())
    });
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
        h2 { "Lag over the last hour" }
        p.muted { "Sampled while the console's pages are read (the overview every 5 s), since the console started." }
        @for r in &shards { (lag_chart(&r.instance_id, &st.health.lag_history(&name, &r.instance_id))) }
        @if who.user.is_some() { (actions(&name, &shards, &who)) }
        h2 { "Shard changes" }
        @if changes.is_empty() { p.muted { "No one has restarted, skipped, disabled, enabled, rewound or rebuilt it." } }
        @else { table #shard-changes {
            thead { tr {
                th scope="col" { "At" } th scope="col" { "Shard" } th scope="col" { "Change" }
                th scope="col" { "State" } th scope="col" { "Cursor" } th scope="col" { "By" } th scope="col" { "Reason" }
            } }
            tbody { @for c in &changes { tr {
                td { (c.changed_at.format("%Y-%m-%d %H:%M:%S UTC")) }
                td { (c.instance_id) }
                td { (c.action) @if let Some(d) = &c.detail { " " (d) } }
                td { (c.from_status.as_str()) " → " (c.to_status.as_str()) }
                td { (c.cursor_before.to_string()) " → " (c.cursor_after.to_string()) }
                td { (c.changed_by) }
                td { (c.reason.as_deref().unwrap_or("")) }
            } } }
        } }
        h2 { "Latest dead letters" }
        @if recent.rows.is_empty() { p.muted { "None dead." } }
        ul { @for d in &recent.rows {
            li { "event " (d.event_id) " (" (d.event_type.as_deref().unwrap_or("pruned")) "): " span.bad { (d.error) } }
        } }
        p { a href=(link) { "All of its dead letters" } }
        h2 { "Definition" }
        @match &spec {
            Some((json, source)) => {
                p.muted { "From " (source) ". Secrets, header values and URL credentials are masked: they never reach the browser." }
                pre.payload #spec tabindex="0" aria-label="the definition, secrets masked" { (json) }
            }
            None => { p.muted { "No definition stored (deleted?)." } }
        }
    };
    Ok(page::render(&format!("Consumer {name}"), &who, body))
}

/// The forms of the shard actions, each one POST of `/consumers/{name}/act` with its CSRF token.
fn actions(name: &str, shards: &[ShardStatus], who: &Who) -> Markup {
    let url = format!("/consumers/{}/act", form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>());
    html! {
        h2 { "Actions" }
        p.muted { "Each is the operation `highwater consumer restart|skip|disable|enable|rewind|rebuild` runs, audited with you as who." }
        form.actions method="post" action=(url) {
            input type="hidden" name="csrf" value=(who.csrf);
            fieldset.actions {
                legend.muted { "Shards and cursor" }
                label { "Shard"
                    select name="instance" {
                        option value="" { "every shard it applies to" }
                        @for s in shards { option value=(s.instance_id) { (s.instance_id) } }
                    }
                }
                label { "Rewind to" input type="text" name="to" placeholder="earliest, latest, an event id or an RFC 3339 time"; }
                label { "Skip only event" input type="text" name="event" inputmode="numeric" placeholder="the failing one"; }
                label { "Reason" input type="text" name="reason"; }
                button type="submit" name="do" value="restart" { "Restart" }
                button type="submit" name="do" value="skip" { "Skip failing event" }
                button type="submit" name="do" value="disable" { "Disable" }
                button type="submit" name="do" value="enable" { "Enable" }
                button type="submit" name="do" value="rewind" { "Rewind" }
                button.danger type="submit" name="do" value="rebuild" { "Rebuild read model" }
            }
        }
    }
}

/// The shard's lag samples as a line over the last hour (server-side SVG: no script).
fn lag_chart(instance: &str, samples: &[(f64, i64)]) -> Markup {
    const W: f64 = 360.0;
    const H: f64 = 48.0;
    let max = samples.iter().map(|s| s.1).max().unwrap_or(0).max(1) as f64;
    let points: Vec<String> = samples
        .iter()
        .map(|(ago, lag)| format!("{:.1},{:.1}", W * (1.0 - ago / 3600.0), H - H * *lag as f64 / max))
        .collect();
    let last = samples.last().map_or(0, |s| s.1);
    let label = format!(
        "lag of shard {instance}: {} samples, now {last} events, at most {max} in the last hour",
        samples.len()
    );
    html! {
        figure.lag {
            svg width=(W) height=(H) viewBox={ "0 0 " (W) " " (H) } role="img" aria-label=(label) {
                polyline points=(points.join(" ")) fill="none" stroke="#0550ae" stroke-width="1.5" {}
            }
            figcaption.muted { (instance) ": " (last) " events now, at most " (max) " (" (samples.len()) " samples)" }
        }
    }
}
