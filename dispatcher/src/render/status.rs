//! `consumer status` (and the quickstart's closing table): one line per shard, then a line per
//! shard that waits on something (bootstrap, rebuild, the fence, a partition barrier).
use highwater_store::ops::ShardStatus;

use super::table::{Align::*, render};

/// A table of shard statuses, one line each, then a line per shard that waits on something.
pub fn render_table(rows: &[ShardStatus]) -> String {
    let columns = [
        ("CONSUMER", Left),
        ("INSTANCE", Left),
        ("DELIVERY", Left),
        ("STATUS", Left),
        ("DELIVERED", Right),
        ("LAG", Right),
        ("LAG(s)", Right),
        ("ATTEMPTS", Right),
        ("LAST ERROR", Left),
    ];
    let mut out = render(
        0,
        &columns,
        rows.iter().map(|r| {
            vec![
                r.consumer.clone(),
                r.instance_id.clone(),
                r.delivery.to_string(),
                r.status.to_string(),
                r.delivered_count.to_string(),
                r.lag_events.to_string(),
                r.lag_seconds.map(|s| format!("{s:.1}")).unwrap_or_else(|| "-".into()),
                r.attempts.to_string(),
                r.last_error.as_deref().unwrap_or("").chars().take(60).collect(),
            ]
        }),
    );
    for r in rows {
        if r.bootstrap_pending {
            out.push_str(&format!(
                "{}/{}: bootstrap pending (disabled until `highwater consumer bootstrap {}` succeeds)\n",
                r.consumer, r.instance_id, r.consumer
            ));
        }
        if let Some(p) = &r.rebuild {
            out.push_str(&format!("{}/{}: rebuild {p}\n", r.consumer, r.instance_id));
        }
        if let Some(h) = &r.held_by_fence {
            out.push_str(&format!(
                "{}/{}: {} event(s) held by the fence: {h}\n",
                r.consumer, r.instance_id, r.held_events
            ));
        }
        if let Some(b) = r.barrier_event_id {
            let at = if r.cursor_event_id == b {
                "at the barrier".to_owned()
            } else {
                format!("{} event(s) to the barrier", r.lag_events)
            };
            out.push_str(&format!(
                "{}/{}: partitions changing to {}: delivers up to event {b}, then the new split takes over ({at})\n",
                r.consumer, r.instance_id, r.partitions
            ));
        }
    }
    // Flow control is the consumer's, not a shard's: one line per consumer.
    let mut seen = std::collections::BTreeSet::new();
    for r in rows.iter().filter(|r| r.paused_until.is_some() || r.rate_limited_until.is_some()) {
        if !seen.insert(&r.consumer) {
            continue;
        }
        if let Some(until) = r.paused_until {
            out.push_str(&format!(
                "{}: throttled until {} by the receiver (no attempt counted): {}\n",
                r.consumer,
                until.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                r.pause_reason.as_deref().unwrap_or("").chars().take(200).collect::<String>()
            ));
        }
        if let Some(until) = r.rate_limited_until {
            out.push_str(&format!(
                "{}: throttled by spec.rateLimit until {} ({:.1}s throttled in total)\n",
                r.consumer,
                until.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                r.throttled_seconds
            ));
        }
    }
    if let Some(h) = rows.iter().find_map(|r| r.held_by_fence.as_ref()) {
        out.push_str(&format!("  fix: {}\n", h.fix()));
    }
    out
}
