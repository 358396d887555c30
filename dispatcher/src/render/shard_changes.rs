//! `consumer history`: one line per shard change, newest first, with who made it and why.
use highwater_store::ops::ShardChangeRecord;

use super::table::{Align::*, render};

pub fn render_shard_changes(rows: &[ShardChangeRecord]) -> String {
    let columns = [
        ("AT", Left),
        ("INSTANCE", Left),
        ("ACTION", Left),
        ("STATUS", Left),
        ("CURSOR", Left),
        ("BY", Left),
        ("REASON", Left),
    ];
    render(
        0,
        &columns,
        rows.iter().map(|c| {
            let action = match &c.detail {
                Some(d) => format!("{} {d}", c.action),
                None => c.action.clone(),
            };
            vec![
                c.changed_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                c.instance_id.clone(),
                action,
                format!("{} -> {}", c.from_status.as_str(), c.to_status.as_str()),
                format!("{} -> {}", c.cursor_before, c.cursor_after),
                c.changed_by.clone(),
                c.reason.clone().unwrap_or_default(),
            ]
        }),
    )
}
