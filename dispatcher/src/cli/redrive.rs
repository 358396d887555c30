//! What `highwater consumer redrive` prints (`highwater_ops::Redrive` is the operation; its flags
//! are parsed in `consumer.rs`).
use highwater_ops::{
    Redrive,
    redrive_rows::{Plan, Progress},
};

use super::operation::{Followed, Shown};
use crate::{
    Error,
    table::{Align::*, render_rows},
};

impl Shown for Redrive {
    fn render_preview(p: &Plan) -> String {
        render_plan(p, true)
    }

    fn render_outcome(p: &Plan) -> String {
        render_plan(p, false)
    }
}

impl Followed for Redrive {
    fn consumer(&self) -> &str {
        &self.selection.consumer
    }

    fn failed_line(id: i64, error: &str) -> String {
        format!("event {id}: redrive failed, a dead letter again: {error}")
    }

    fn summary(&self, p: &Progress) -> String {
        format!(
            "eventconsumer/{}: {} redriven, {} failed again, {} pending",
            self.consumer(),
            p.redriven,
            p.failed.len(),
            p.pending
        )
    }

    fn failed(&self, failed: usize, selected: usize) -> Error {
        Error::refused(format!("{failed} of {selected} redriven dead letters failed again")).with_fix(format!(
            "fix the cause, then redrive them again (`highwater consumer dead-letters {}`)",
            self.consumer()
        ))
    }

    fn selected(p: &Plan) -> usize {
        p.selected.len()
    }
}

fn render_plan(p: &Plan, dry_run: bool) -> String {
    let mut out = if dry_run {
        format!(
            "would redrive {} dead letter(s) of consumer {} (dry run: nothing changed)\n",
            p.selected.len(),
            p.consumer
        )
    } else {
        format!("redrive of {} dead letter(s) of consumer {} requested\n", p.selected.len(), p.consumer)
    };
    out.push_str(&render_rows(
        2,
        &[Left, Right, Left, Left, Left, Left, Left],
        p.selected.iter().map(|s| {
            let error: String = s.error.replace(['\n', '\r'], " ").chars().take(80).collect();
            let (event_id, stream) = (s.event_id.to_string(), s.stream.to_string());
            vec![
                "event".into(),
                event_id,
                s.event_type.clone(),
                stream,
                "instance".into(),
                s.instance_id.clone(),
                error,
            ]
        }),
    ));
    for l in &p.left_out {
        out.push_str(&format!("  left out: event {} (instance {}): {}\n", l.event_id, l.instance_id, l.why));
    }
    out
}
