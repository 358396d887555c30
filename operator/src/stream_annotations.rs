//! The annotations that act on one stream's events: `highwater.dev/discard` (a dead letter
//! never delivered, the events parked behind it released: `highwater consumer discard`) and
//! `highwater.dev/replay` (a stream's events delivered again: `highwater consumer replay`).
//! Each new value acts once (`crate::annotations` records it in the status); a refusal is a
//! Warning Event with the refusal's message and nothing changed.
use highwater_crds::EventConsumer;
use highwater_ops::{Confirm, Discard, Replay, replay_rows::parse_stream};

use crate::{
    Result,
    annotations::audit,
    context::Context,
    events::{self, Reason},
};

/// `<event id>`, optionally followed by `#<anything>` to make a new value: discards that dead
/// letter once.
pub const DISCARD: &str = "highwater.dev/discard";
/// `<TYPE>/<ID>[@<since event id>]`, optionally followed by `#<anything>`: replays that stream
/// (from that event on) once.
pub const REPLAY: &str = "highwater.dev/replay";

/// The event id of a discard value.
fn discard_target(value: &str) -> Option<i64> {
    value.split('#').next().unwrap_or_default().trim().parse::<i64>().ok().filter(|id| *id > 0)
}

/// The stream and `since` of a replay value; `#` ends the value (stream ids holding `#` or `@`
/// cannot be named here; the CLI and the HTTP API can).
fn replay_target(value: &str) -> Option<(String, Option<i64>)> {
    let target = value.split('#').next().unwrap_or_default().trim();
    let (stream, since) = match target.rsplit_once('@') {
        Some((stream, since)) => (stream, Some(since.trim().parse::<i64>().ok().filter(|id| *id > 0)?)),
        None => (target, None),
    };
    parse_stream(stream).ok()?;
    Some((stream.to_owned(), since))
}

pub async fn discard(ctx: &Context, ec: &EventConsumer, consumer: &str, value: &str) -> Result<()> {
    let Some(event) = discard_target(value) else {
        let m = format!("{DISCARD}: {value:?} is not an event id (fix: e.g. {DISCARD}=4711)");
        events::on(ctx, ec, Reason::DiscardRefused, m).await;
        return Ok(());
    };
    let op = Discard { consumer: consumer.to_owned(), event, instance: None };
    let done = highwater_ops::execute(&op, &ctx.pool, &audit(ec, DISCARD, value), Confirm::Given).await;
    events::of_operation(ctx, ec, done, Reason::DiscardRefused, |d| {
        let released = if d.released.is_empty() {
            "no event was parked behind it".to_owned()
        } else {
            let ids: Vec<String> = d.released.iter().take(20).map(i64::to_string).collect();
            let more = if d.released.len() > 20 { ", …" } else { "" };
            format!(
                "{} parked event(s) released in stream order (events {}{more}); a dispatcher delivers them",
                d.released.len(),
                ids.join(", ")
            )
        };
        (Reason::Discarded, format!("dead letter of event {event} discarded; {released}"))
    })
    .await
}

pub async fn replay(ctx: &Context, ec: &EventConsumer, consumer: &str, value: &str) -> Result<()> {
    let Some((stream, since)) = replay_target(value) else {
        let m = format!(
            "{REPLAY}: {value:?} is not TYPE/ID[@SINCE-EVENT-ID] (fix: e.g. {REPLAY}=order/o-17 or order/o-17@4711)"
        );
        events::on(ctx, ec, Reason::ReplayRefused, m).await;
        return Ok(());
    };
    let op = Replay { consumer: consumer.to_owned(), stream, since };
    let done = highwater_ops::execute(&op, &ctx.pool, &audit(ec, REPLAY, value), Confirm::Given).await;
    events::of_operation(ctx, ec, done, Reason::ReplayRefused, |plan| {
        let left = if plan.left_out.is_empty() {
            String::new()
        } else {
            format!("; {} left out (beyond the cursor, not selected, or dead letters)", plan.left_out.len())
        };
        let note = format!(
            "replay of {} event(s) of stream {} requested{left}; a dispatcher delivers them",
            plan.selected.len(),
            plan.stream
        );
        (Reason::Replayed, note)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_values_name_an_event() {
        assert_eq!(discard_target("4711"), Some(4711));
        assert_eq!(discard_target("17#again"), Some(17));
        assert_eq!(discard_target("all"), None);
        assert_eq!(discard_target("0"), None);
    }

    #[test]
    fn replay_values_name_a_stream_and_an_optional_first_event() {
        assert_eq!(replay_target("order/o-17"), Some(("order/o-17".into(), None)));
        assert_eq!(replay_target("order/o-17@4711#2"), Some(("order/o-17".into(), Some(4711))));
        assert_eq!(replay_target("order/o-17#again"), Some(("order/o-17".into(), None)));
        assert_eq!(replay_target("order"), None);
        assert_eq!(replay_target("order/o-17@x"), None);
    }
}
