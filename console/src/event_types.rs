//! The event-type registry: every type with its compatibility mode, latest version and aliases;
//! one type's versions with their schemas (pretty JSON), upcasts, and the stored events per
//! version (`highwater event-types show`).
use axum::{
    Extension,
    extract::{Path, State},
    http::StatusCode,
    response::Html,
};
use highwater_store::event_types::{self, VersionCount};
use maud::html;

use crate::{Console, auth::Who, error::PageError, page};

fn type_link(name: &str) -> String {
    format!("/event-types/{}", form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>())
}

pub(crate) async fn list(State(st): State<Console>, Extension(who): Extension<Who>) -> Result<Html<String>, PageError> {
    let types = event_types::list_types(&st.pool).await?;
    let body = html! {
        h1 { "Event types" }
        table {
            caption.muted { (types.len()) " registered types" }
            thead { tr {
                th scope="col" { "Type" } th scope="col" { "Compatibility" } th.num scope="col" { "Latest version" }
                th scope="col" { "Former names" } th scope="col" { "Description" }
            } }
            tbody { @for t in &types { tr {
                td { a href=(type_link(&t.event_type)) { (t.event_type) } @if let Some(of) = &t.alias_of { span.muted { " (former name of " (of) ")" } } }
                td { (t.compatibility.as_str()) }
                td.num { (t.latest) }
                td { (t.aliases.join(", ")) }
                td { (t.description.as_deref().unwrap_or_default()) }
            } } }
        }
    };
    Ok(page::render("Event types", &who, body))
}

pub(crate) async fn show(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    Path(name): Path<String>,
) -> Result<Html<String>, PageError> {
    let Some(t) = event_types::get(&st.pool, &name).await? else {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            format!("no event type {name:?} is registered; see the list of event types"),
        ));
    };
    let counts: Vec<VersionCount> = event_types::version_counts(&st.pool, &name).await?;
    let events_of = |v: i32| counts.iter().find(|c| c.version == v).map_or(0, |c| c.events);
    let body = html! {
        h1 { "Event type " (t.event_type) }
        dl {
            dt { "Compatibility mode" } dd { (t.compatibility.as_str()) }
            dt { "Latest version" } dd { (t.latest) }
            @if !t.aliases.is_empty() { dt { "Former names" } dd { (t.aliases.join(", ")) } }
            @if let Some(of) = &t.alias_of { dt { "Former name of" } dd { a href=(type_link(of)) { (of) } } }
            @if let Some(d) = &t.description { dt { "Description" } dd { (d) } }
        }
        table {
            thead { tr {
                th.num scope="col" { "Version" } th.num scope="col" { "Events stored" }
                th scope="col" { "Schema" } th scope="col" { "Upcast from the version before" }
            } }
            tbody { @for v in &t.versions { tr {
                td.num { (v.version) }
                td.num { (events_of(v.version)) }
                td { @match &v.schema {
                    Some(s) => { pre.payload tabindex="0" aria-label={ "schema of version " (v.version) } { (serde_json::to_string_pretty(s).unwrap_or_default()) } }
                    None => { span.muted { "any JSON" } }
                } }
                td { @if let Some(u) = &v.upcast { pre { (u) } } }
            } } }
        }
    };
    Ok(page::render(&format!("Event type {name}"), &who, body))
}
