//! A consumer's shard actions from its page: restart, skip, disable, enable, rewind (one
//! `highwater_ops::ShardChange`) and rebuild (`highwater_ops::Rebuild`), audited with the console
//! user as "who". What the CLI asks before (a rewind forward past undelivered events) the page
//! asks too: a page with the operation's own question and a confirmation box, submitted again.
use axum::{
    Extension,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::Html,
};
use highwater_ops::{Audit, Change, Confirm, Operation, Rebuild, ShardChange};
use highwater_store::ops::RewindTo;
use maud::html;

use crate::{Console, auth::Who, error::PageError, form::Form, page};

const CONFIRM_FIX: &str = "tick the confirmation box and submit again";

fn change(form: &Form) -> Result<Option<Change>, PageError> {
    let bad = |m: String| PageError::new(StatusCode::BAD_REQUEST, m);
    Ok(Some(match form.get("do") {
        Some("restart") => Change::Restart,
        Some("disable") => Change::Disable,
        Some("enable") => Change::Enable,
        Some("skip") => {
            let event = match form.get("event") {
                None => None,
                Some(e) => Some(e.parse::<i64>().map_err(|_| {
                    bad(format!("skip only event {e:?}: not an event id; leave it empty to skip the failing event"))
                })?),
            };
            Change::Skip { event }
        }
        Some("rewind") => {
            let to = form.get("to").ok_or_else(|| {
                bad("rewind needs a target: earliest, latest, an event id or an RFC 3339 time".into())
            })?;
            Change::Rewind { to: to.parse::<RewindTo>().map_err(|e| bad(e.to_string()))? }
        }
        Some("rebuild") => return Ok(None),
        _ => return Err(bad("no action: choose restart, skip, disable, enable, rewind or rebuild".into())),
    }))
}

pub(crate) async fn act(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Html<String>, PageError> {
    let form = Form::parse(&body)?;
    let user = who.require_user()?.to_owned();
    who.require_csrf(&form)?;
    let audit = Audit { by: user.clone(), reason: form.get("reason").map(str::to_owned) };
    let confirmed = form.get("confirm") == Some("yes");
    let back = format!("/consumers/{}", form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>());
    let lines: Vec<String> = match change(&form)? {
        Some(change) => {
            let op = ShardChange { consumer: name.clone(), instance: form.get("instance").map(str::to_owned), change };
            if !confirmed {
                op.validate(&audit)?;
                if let Some(q) = op.confirmation(&op.preview(&st.pool).await?) {
                    return Ok(ask(&who, &form, &back, &q.question, &q.why));
                }
            }
            let confirm = if confirmed { Confirm::Given } else { Confirm::Refuse { fix: CONFIRM_FIX } };
            highwater_ops::execute(&op, &st.pool, &audit, confirm).await?.iter().map(ToString::to_string).collect()
        }
        None => {
            let op = Rebuild { consumer: name.clone() };
            let done = highwater_ops::execute(&op, &st.pool, &audit, Confirm::Refuse { fix: CONFIRM_FIX }).await?;
            vec![format!("eventconsumer/{name}: {done}")]
        }
    };
    tracing::info!(by = user, action = form.get("do").unwrap_or_default(), consumer = name, "console operation");
    let body = html! {
        h1 { (form.get("do").unwrap_or_default()) ": done" }
        ul #outcome role="status" { @for l in &lines { li { pre { (l) } } } }
        p { a href=(back) { "Back to consumer " (name) } }
    };
    Ok(page::render("Done", &who, body))
}

/// The operation's question, and the same form again with a confirmation box.
fn ask(who: &Who, form: &Form, back: &str, question: &str, why: &str) -> Html<String> {
    let body = html! {
        h1 { "Confirm" }
        p #question role="alert" { (question) "? " span.muted { "(" (why) ")" } }
        form method="post" action={ (back) "/act" } {
            input type="hidden" name="csrf" value=(who.csrf);
            @for k in ["do", "instance", "to", "event", "reason"] {
                @if let Some(v) = form.get(k) { input type="hidden" name=(k) value=(v); }
            }
            fieldset.actions {
                label { input type="checkbox" name="confirm" value="yes" required; " I confirm: " (question) }
                button.primary type="submit" { "Go on" }
            }
        }
        p { a href=(back) { "Cancel" } }
    };
    page::render("Confirm", who, body)
}
