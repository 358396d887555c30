//! Redrive or discard the selected dead letters or every one the filter matches: a dry run's
//! count first (`preview`), then the operation with a reason and, above the CLI's threshold (and
//! for every discard, which no command takes back), a confirmation (`execute`). Each is a
//! `highwater_ops` operation, audited with the console user as "who".
use axum::{Extension, body::Bytes, extract::State, http::StatusCode, response::Html};
use highwater_ops::{
    Audit, CONFIRM_ABOVE, Confirm, Discard, Ran, Redrive, discard_rows::Discarded, redrive_rows::Selection, run,
};
use highwater_store::console::dead_letters::{self as rows, Filter, Key, State as LetterState};
use maud::{Markup, html};

use crate::{
    Console,
    auth::Who,
    dead_letters::{decode_key, encode_key, filter, hidden_filter},
    error::PageError,
    form::Form,
};

/// "Discard the whole filter" takes at most this many dead letters at a time (one operation
/// each); a larger filter is discarded in several goes.
const MAX_DISCARD: i64 = 10_000;

const CONFIRM_FIX: &str = "tick the confirmation box of the dry run's page and submit it again";

#[derive(Clone, Copy, PartialEq)]
enum Act {
    Redrive,
    Discard,
}

enum Scope {
    Selection(Vec<Key>),
    Filter(Filter),
}

struct Request {
    act: Act,
    scope: Scope,
    reason: Option<String>,
    confirmed: bool,
    who: String,
}

fn parse(form: &Form, who: &Who) -> Result<Request, PageError> {
    let user = who.require_user()?.to_owned();
    who.require_csrf(form)?;
    let bad = |m: &str| PageError::new(StatusCode::BAD_REQUEST, m);
    let (act, whole) = match form.get("do") {
        Some("redrive-selection") => (Act::Redrive, false),
        Some("discard-selection") => (Act::Discard, false),
        Some("redrive-filter") => (Act::Redrive, true),
        Some("discard-filter") => (Act::Discard, true),
        _ => return Err(bad("no action: choose redrive or discard, of the selection or of the filter")),
    };
    let scope = if whole {
        let mut f = filter(|k| form.get(k).map(str::to_owned));
        // Only dead letters are redriven or discarded, whatever state the page showed.
        f.state = Some(LetterState::Dead);
        Scope::Filter(f)
    } else {
        let keys: Option<Vec<Key>> = form.all("key").map(decode_key).collect();
        let keys = keys.ok_or_else(|| bad("a selected row's key is malformed; reload the page"))?;
        if keys.is_empty() {
            return Err(bad("nothing selected: tick the rows to act on, or act on the whole filter"));
        }
        Scope::Selection(keys)
    };
    let reason = form.get("reason").map(str::to_owned);
    if act == Act::Discard && reason.is_none() {
        return Err(bad("a discard needs a reason: the audit says why an event was never delivered"));
    }
    Ok(Request { act, scope, reason, confirmed: form.get("confirm") == Some("yes"), who: user })
}

fn redrive_of_key(k: &Key) -> Redrive {
    Redrive {
        selection: Selection {
            consumer: k.consumer.clone(),
            instance: Some(k.instance_id.clone()),
            event: Some(k.event_id),
            ..Selection::default()
        },
        rate: None,
    }
}

/// The one redrive of a filter: it needs its consumer (a redrive is one consumer's).
fn redrive_of_filter(f: &Filter) -> Result<Redrive, PageError> {
    let Some(consumer) = f.consumer.clone() else {
        return Err(PageError::new(
            StatusCode::CONFLICT,
            "redriving the whole filter needs a consumer in the filter (a redrive is one consumer's); filter by consumer first",
        ));
    };
    let all = f.event_type.is_none() && f.error_contains.is_none();
    Ok(Redrive {
        selection: Selection {
            consumer,
            event_type: f.event_type.clone(),
            error_contains: f.error_contains.clone(),
            all,
            ..Selection::default()
        },
        rate: None,
    })
}

async fn discard_keys(st: &Console, scope: &Scope) -> Result<Vec<Key>, PageError> {
    Ok(match scope {
        Scope::Selection(k) => k.clone(),
        Scope::Filter(f) => rows::keys(&st.pool, f, MAX_DISCARD).await?,
    })
}

fn discard_of_key(k: &Key) -> Discard {
    Discard { consumer: k.consumer.clone(), event: k.event_id, instance: Some(k.instance_id.clone()) }
}

/// What the dry run found: the dead letters it takes, and those it leaves out and why.
struct Dry {
    taken: Vec<String>,
    left_out: Vec<String>,
}

async fn dry_run(st: &Console, r: &Request) -> Result<Dry, PageError> {
    let audit = Audit { by: r.who.clone(), reason: r.reason.clone() };
    let mut dry = Dry { taken: Vec::new(), left_out: Vec::new() };
    match (r.act, &r.scope) {
        (Act::Redrive, scope) => {
            let ops: Vec<Redrive> = match scope {
                Scope::Selection(keys) => keys.iter().map(redrive_of_key).collect(),
                Scope::Filter(f) => vec![redrive_of_filter(f)?],
            };
            for op in &ops {
                match run(op, &st.pool, &audit, true, Confirm::Given).await {
                    Ok(Ran::Previewed(plan)) => {
                        dry.taken.extend(plan.selected.iter().map(|s| {
                            format!(
                                "event {} ({}) of {} on {}: {}",
                                s.event_id, s.event_type, plan.consumer, s.instance_id, s.error
                            )
                        }));
                        dry.left_out.extend(
                            plan.left_out
                                .iter()
                                .map(|l| format!("event {} on {}: {}", l.event_id, l.instance_id, l.why)),
                        );
                    }
                    Ok(Ran::Executed(_)) => unreachable!("a dry run executes nothing"),
                    Err(e) if e.is_refusal() && matches!(scope, Scope::Selection(_)) => {
                        let k = &op.selection;
                        dry.left_out.push(format!("event {} of {}: {e}", k.event.unwrap_or_default(), k.consumer));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        (Act::Discard, scope) => {
            dry.taken = discard_keys(st, scope)
                .await?
                .iter()
                .map(|k| format!("event {} of {} on {}", k.event_id, k.consumer, k.instance_id))
                .collect();
        }
    }
    Ok(dry)
}

fn verb(act: Act) -> &'static str {
    match act {
        Act::Redrive => "redrive",
        Act::Discard => "discard",
    }
}

fn hidden_request(form: &Form, r: &Request) -> Markup {
    html! {
        input type="hidden" name="do" value=(form.get("do").unwrap_or_default());
        @match &r.scope {
            Scope::Selection(keys) => { @for k in keys { input type="hidden" name="key" value=(encode_key(k)); } }
            Scope::Filter(f) => { (hidden_filter(f)) }
        }
    }
}

pub(crate) async fn preview(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    body: Bytes,
) -> Result<Html<String>, PageError> {
    let form = Form::parse(&body)?;
    let r = parse(&form, &who)?;
    let dry = dry_run(&st, &r).await?;
    let n = dry.taken.len();
    // The CLI's threshold for a redrive; a discard is confirmed always (the operation asks).
    let must_confirm = r.act == Act::Discard || n > CONFIRM_ABOVE;
    let v = verb(r.act);
    let body = html! {
        h1 { "Dry run: " (v) " " (n) " dead letters" }
        p #dry-run-count { "This would " (v) " " strong { (n) } " dead letters; nothing has changed yet." }
        @if n > 0 {
            details open[n <= 20] {
                summary { "What it takes" }
                ul { @for t in dry.taken.iter().take(200) { li { pre { (t) } } } }
                @if n > 200 { p.muted { "… and " (n - 200) " more" } }
            }
        }
        @if !dry.left_out.is_empty() {
            h2 { "Left out (" (dry.left_out.len()) ")" }
            ul { @for l in &dry.left_out { li { pre.error { (l) } } } }
        }
        @if n > 0 {
            form method="post" action="/dead-letters/execute" {
                input type="hidden" name="csrf" value=(who.csrf);
                (hidden_request(&form, &r))
                fieldset.actions {
                    label { "Reason" input type="text" name="reason" value=(r.reason.clone().unwrap_or_default()) required[r.act == Act::Discard]; }
                    @if must_confirm {
                        label { input type="checkbox" name="confirm" value="yes" required; " I confirm: " (v) " " (n) " dead letters"
                            @if r.act == Act::Discard { " (never delivered; this cannot be undone)" } }
                    } @else {
                        input type="hidden" name="confirm" value="yes";
                    }
                    button.primary type="submit" { (v) " " (n) }
                }
            }
        }
        p { a href="/dead-letters" { "Back to the dead letters" } }
    };
    Ok(crate::page::render("Dry run", &who, body))
}

pub(crate) async fn execute(
    State(st): State<Console>,
    Extension(who): Extension<Who>,
    body: Bytes,
) -> Result<Html<String>, PageError> {
    let form = Form::parse(&body)?;
    let r = parse(&form, &who)?;
    let audit = Audit { by: r.who.clone(), reason: r.reason.clone() };
    let confirm = if r.confirmed { Confirm::Given } else { Confirm::Refuse { fix: CONFIRM_FIX } };
    let mut done: usize = 0;
    let mut failed: Vec<String> = Vec::new();
    match (r.act, &r.scope) {
        (Act::Redrive, Scope::Selection(keys)) => {
            // One operation per row: the CLI's threshold applies to the selection as a whole.
            if keys.len() > CONFIRM_ABOVE && !r.confirmed {
                return Err(highwater_ops::Error::refused(
                    format!("redrive {} dead letters: more than {CONFIRM_ABOVE} need a confirmation", keys.len()),
                    CONFIRM_FIX,
                )
                .into());
            }
            for k in keys {
                match highwater_ops::execute(&redrive_of_key(k), &st.pool, &audit, Confirm::Given).await {
                    Ok(plan) => done += plan.selected.len(),
                    Err(e) => failed.push(format!("event {} of {}: {e}", k.event_id, k.consumer)),
                }
            }
        }
        (Act::Redrive, Scope::Filter(f)) => {
            let plan = highwater_ops::execute(&redrive_of_filter(f)?, &st.pool, &audit, confirm).await?;
            done = plan.selected.len();
        }
        (Act::Discard, scope) => {
            for k in discard_keys(&st, scope).await? {
                let confirm = if r.confirmed { Confirm::Given } else { Confirm::Refuse { fix: CONFIRM_FIX } };
                match highwater_ops::execute(&discard_of_key(&k), &st.pool, &audit, confirm).await {
                    Ok(Discarded { .. }) => done += 1,
                    // Unconfirmed: the first refusal is the answer, nothing else is tried.
                    Err(e) if !r.confirmed => return Err(e.into()),
                    Err(e) => failed.push(format!("event {} of {}: {e}", k.event_id, k.consumer)),
                }
            }
        }
    }
    tracing::info!(by = r.who, action = verb(r.act), done, failed = failed.len(), "console operation");
    let v = verb(r.act);
    let body = html! {
        h1 { (v) ": done" }
        p #outcome role="status" {
            @match r.act {
                Act::Redrive => { "Requested the redrive of " strong { (done) } " dead letters: a dispatcher of each consumer's group delivers them." }
                Act::Discard => { "Discarded " strong { (done) } " dead letters: never delivered; the events parked behind them are released." }
            }
        }
        @if !failed.is_empty() {
            h2 { "Refused (" (failed.len()) ")" }
            ul { @for f in &failed { li { pre.error { (f) } } } }
        }
        p { a href="/dead-letters?state=any" { "See the dead letters" } }
    };
    Ok(crate::page::render("Done", &who, body))
}
