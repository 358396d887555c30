//! Operations requested with annotations. Each new value acts once: the value handled last is
//! recorded in the status.
use highwater_crds::{EventConsumer, EventConsumerStatus};
use highwater_ops::{Audit, Change, Confirm, Rebuild, Redrive, ShardChange, redrive_rows::Selection};
use kube::ResourceExt;

use crate::{
    Result,
    context::Context,
    events::{self, Reason},
    stream_annotations,
};

/// Any new value restarts the consumer's dead shards once.
pub const RESTART: &str = "highwater.dev/restart";
/// `<event id>`: skips that event on the shards failing on exactly it; a shard failing on
/// another event is left alone and the mismatch is reported.
pub const SKIP: &str = "highwater.dev/skip-event";
/// Any new value rebuilds the read model once (`highwater consumer rebuild`).
pub const REBUILD: &str = "highwater.dev/rebuild";
/// `<event id>` or `all`, optionally followed by `#<anything>` to make a new value: requests the
/// redrive of that dead letter, or of every one, once (`highwater consumer redrive`).
pub const REDRIVE: &str = "highwater.dev/redrive";

pub struct Handled {
    pub restart: Option<String>,
    pub skip: Option<String>,
    pub rebuild: Option<String>,
    pub redrive: Option<String>,
    pub discard: Option<String>,
    pub replay: Option<String>,
}

pub async fn handle(
    ctx: &Context,
    ec: &EventConsumer,
    consumer: &str,
    prev: Option<&EventConsumerStatus>,
) -> Result<Handled> {
    let mut out = Handled {
        restart: prev.and_then(|p| p.handled_restart.clone()),
        skip: prev.and_then(|p| p.handled_skip.clone()),
        rebuild: prev.and_then(|p| p.handled_rebuild.clone()),
        redrive: prev.and_then(|p| p.handled_redrive.clone()),
        discard: prev.and_then(|p| p.handled_discard.clone()),
        replay: prev.and_then(|p| p.handled_replay.clone()),
    };
    let ann = ec.annotations();
    if let Some(v) = ann.get(RESTART).filter(|v| out.restart.as_ref() != Some(*v)) {
        let op = ShardChange { consumer: consumer.to_owned(), instance: None, change: Change::Restart };
        let done = highwater_ops::execute(&op, &ctx.pool, &audit(ec, RESTART, v), Confirm::Given).await;
        events::of_operation(ctx, ec, done, Reason::RestartRefused, |t| {
            let shards: Vec<&str> = t.iter().map(|t| t.instance_id.as_str()).collect();
            (Reason::Restarted, format!("restarted dead shard(s) {}", shards.join(", ")))
        })
        .await?;
        out.restart = Some(v.clone());
    }
    if let Some(v) = ann.get(SKIP).filter(|v| out.skip.as_ref() != Some(*v)) {
        match v.trim().parse::<i64>() {
            Err(_) => {
                events::on(ctx, ec, Reason::SkipInvalid, format!("{SKIP}: {v:?} is not an event id")).await;
            }
            Ok(id) => {
                let change = Change::Skip { event: Some(id) };
                let op = ShardChange { consumer: consumer.to_owned(), instance: None, change };
                let done = highwater_ops::execute(&op, &ctx.pool, &audit(ec, SKIP, v), Confirm::Given).await;
                events::of_operation(ctx, ec, done, Reason::SkipMismatch, |t| {
                    let shards: Vec<&str> = t.iter().map(|t| t.instance_id.as_str()).collect();
                    (Reason::Skipped, format!("skipped event {id} on shard(s) {}", shards.join(", ")))
                })
                .await?;
            }
        }
        out.skip = Some(v.clone());
    }
    if let Some(v) = ann.get(REBUILD).filter(|v| out.rebuild.as_ref() != Some(*v)) {
        let op = Rebuild { consumer: consumer.to_owned() };
        let done = highwater_ops::execute(&op, &ctx.pool, &audit(ec, REBUILD, v), Confirm::Given).await;
        events::of_operation(ctx, ec, done, Reason::RebuildRefused, |r| (Reason::Rebuilt, r.to_string())).await?;
        out.rebuild = Some(v.clone());
    }
    if let Some(v) = ann.get(REDRIVE).filter(|v| out.redrive.as_ref() != Some(*v)) {
        redrive(ctx, ec, consumer, v).await?;
        out.redrive = Some(v.clone());
    }
    if let Some(v) = ann.get(stream_annotations::DISCARD).filter(|v| out.discard.as_ref() != Some(*v)) {
        stream_annotations::discard(ctx, ec, consumer, v).await?;
        out.discard = Some(v.clone());
    }
    if let Some(v) = ann.get(stream_annotations::REPLAY).filter(|v| out.replay.as_ref() != Some(*v)) {
        stream_annotations::replay(ctx, ec, consumer, v).await?;
        out.replay = Some(v.clone());
    }
    Ok(out)
}

/// What a `highwater.dev/redrive` value asks for: one event's dead letter, or every one.
fn redrive_target(value: &str) -> Option<Option<i64>> {
    let target = value.split('#').next().unwrap_or_default().trim();
    if target == "all" {
        return Some(None);
    }
    target.parse::<i64>().ok().filter(|id| *id > 0).map(Some)
}

/// Who set the annotation `key`, as far as the object says: the field manager that owns it (the
/// Kubernetes user is in the API server's audit log, not in the object).
pub fn annotated_by(ec: &EventConsumer, key: &str) -> String {
    let manager = ec.managed_fields().iter().find_map(|m| {
        let fields = m.fields_v1.as_ref()?;
        fields.0.get("f:metadata")?.get("f:annotations")?.get(format!("f:{key}"))?;
        m.manager.clone()
    });
    format!("kubernetes:{}", manager.as_deref().unwrap_or("unknown field manager"))
}

/// Who asked for the operation of annotation `key` (its field manager) and why (the annotation).
pub(crate) fn audit(ec: &EventConsumer, key: &str, value: &str) -> Audit {
    let ns = ec.namespace().unwrap_or_default();
    Audit { by: annotated_by(ec, key), reason: Some(format!("annotation {key}={value} on {ns}/{}", ec.name_any())) }
}

async fn redrive(ctx: &Context, ec: &EventConsumer, consumer: &str, value: &str) -> Result<()> {
    let Some(event) = redrive_target(value) else {
        let m = format!("{REDRIVE}: {value:?} is neither an event id nor all (fix: e.g. {REDRIVE}=4711 or all)");
        events::on(ctx, ec, Reason::RedriveRefused, m).await;
        return Ok(());
    };
    let selection = Selection { consumer: consumer.to_owned(), event, all: event.is_none(), ..Default::default() };
    let op = Redrive { selection, rate: None };
    let done = highwater_ops::execute(&op, &ctx.pool, &audit(ec, REDRIVE, value), Confirm::Given).await;
    events::of_operation(ctx, ec, done, Reason::RedriveRefused, |plan| {
        let ids: Vec<String> = plan.selected.iter().take(20).map(|s| s.event_id.to_string()).collect();
        let more = if plan.selected.len() > 20 { ", …" } else { "" };
        let left = if plan.left_out.is_empty() {
            String::new()
        } else {
            format!("; {} left out (pruned or instance gone)", plan.left_out.len())
        };
        let note = format!(
            "redrive of {} dead letter(s) requested (events {}{more}){left}; a dispatcher delivers them",
            plan.selected.len(),
            ids.join(", ")
        );
        (Reason::Redriven, note)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redrive_values_name_an_event_or_all() {
        assert_eq!(redrive_target("4711"), Some(Some(4711)));
        assert_eq!(redrive_target(" all "), Some(None));
        assert_eq!(redrive_target("all#2"), Some(None));
        assert_eq!(redrive_target("17#again"), Some(Some(17)));
        assert_eq!(redrive_target("everything"), None);
        assert_eq!(redrive_target("0"), None);
    }
}
