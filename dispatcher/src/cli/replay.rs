//! What `highwater consumer replay` prints (`highwater_ops::Replay` is the operation; its flags
//! are parsed in `consumer.rs`).
use highwater_ops::{
    Replay,
    replay_rows::{Plan, Progress},
};

use super::operation::{Followed, Shown};
use crate::{
    Error,
    table::{Align::*, render_rows},
};

impl Shown for Replay {
    fn render_preview(p: &Plan) -> String {
        render_replay(p, true)
    }

    fn render_outcome(p: &Plan) -> String {
        render_replay(p, false)
    }
}

impl Followed for Replay {
    fn consumer(&self) -> &str {
        &self.consumer
    }

    fn failed_line(id: i64, error: &str) -> String {
        format!("event {id}: replay failed: {error}")
    }

    fn summary(&self, p: &Progress) -> String {
        format!(
            "eventconsumer/{}: {} replayed, {} failed, {} pending",
            self.consumer,
            p.replayed,
            p.failed.len(),
            p.pending
        )
    }

    fn failed(&self, failed: usize, selected: usize) -> Error {
        Error::refused(format!("{failed} of {selected} replayed events failed"))
            .with_fix("fix the cause, then replay the stream again (--since the first that failed)")
    }

    fn selected(p: &Plan) -> usize {
        p.selected.len()
    }
}

fn render_replay(p: &Plan, dry_run: bool) -> String {
    let mut out = if dry_run {
        format!(
            "would replay {} event(s) of stream {} to consumer {} (dry run: nothing changed)\n",
            p.selected.len(),
            p.stream,
            p.consumer
        )
    } else {
        format!(
            "replay request {}: {} event(s) of stream {} to consumer {}\n",
            p.request_id.unwrap_or_default(),
            p.selected.len(),
            p.stream,
            p.consumer
        )
    };
    out.push_str(&render_rows(
        2,
        &[Left, Right, Left, Left, Left, Left, Left],
        p.selected.iter().map(|s| {
            let version = s.stream_version.map_or_else(|| "-".to_owned(), |v| v.to_string());
            let event_id = s.event_id.to_string();
            let (type_, instance) = (s.event_type.clone(), s.instance_id.clone());
            vec!["event".into(), event_id, type_, "version".into(), version, "instance".into(), instance]
        }),
    ));
    for l in &p.left_out {
        out.push_str(&format!("  left out: event {} (instance {}): {}\n", l.event_id, l.instance_id, l.why));
    }
    out
}
