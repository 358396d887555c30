//! `consumer dead-letters`: one line per dead letter, with who redrove or discarded it and why.
use chrono::{DateTime, Utc};
use highwater_store::ops::DeadLetter;

use super::table::{Align::*, render};

/// One line per dead letter; the error on one line, cut to fit a terminal.
pub fn render_dead_letters(rows: &[DeadLetter]) -> String {
    let columns = [
        ("CONSUMER", Left),
        ("INSTANCE", Left),
        ("EVENT", Right),
        ("TYPE", Left),
        ("ATTEMPTS", Right),
        ("PARKED AT", Left),
        ("STATE", Left),
        ("ERROR", Left),
    ];
    render(
        0,
        &columns,
        rows.iter().map(|d| {
            let error: String = d.error.replace(['\n', '\r'], " ").chars().take(100).collect();
            vec![
                d.consumer.clone(),
                d.instance_id.clone(),
                d.event_id.to_string(),
                d.event_type.as_deref().unwrap_or("(pruned)").to_owned(),
                d.attempts.to_string(),
                d.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                d.state.to_string(),
                format!("{error}{}", redrive_note(d)),
            ]
        }),
    )
}

/// ` (redriven at T by U: reason)` and the like, after the error.
fn redrive_note(d: &DeadLetter) -> String {
    let by = d.redrive_by.as_deref().unwrap_or("?");
    let reason = d.redrive_reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
    let at = |t: &Option<DateTime<Utc>>| t.map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()).unwrap_or_default();
    match d.state.as_str() {
        "discarded" => format!(
            " (discarded at {} by {}{})",
            at(&d.discarded_at),
            d.discarded_by.as_deref().unwrap_or("?"),
            d.discard_reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
        ),
        "redriven" => format!(" (redriven at {} by {by}{reason})", at(&d.redriven_at)),
        "pending" => format!(" (redrive requested at {} by {by}{reason})", at(&d.redrive_requested_at)),
        _ if d.redrive_requested_at.is_some() => {
            format!(" (after a redrive requested at {} by {by}{reason})", at(&d.redrive_requested_at))
        }
        _ => String::new(),
    }
}
