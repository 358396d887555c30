//! Operations requested with annotations. Each new value acts once: the value handled last is
//! recorded in the status.
use highwater::ops;
use highwater_crds::{EventConsumer, EventConsumerStatus};
use kube::ResourceExt;

use crate::{
    Result,
    context::Context,
    events::{self, Reason},
};

/// Any new value restarts the consumer's dead shards once.
pub const RESTART: &str = "highwater.dev/restart";
/// `<event id>`: skips that event on the shards failing on exactly it; a shard failing on
/// another event is left alone and the mismatch is reported.
pub const SKIP: &str = "highwater.dev/skip-event";
/// Any new value rebuilds the read model once (`highwater consumer rebuild`).
pub const REBUILD: &str = "highwater.dev/rebuild";

pub struct Handled {
    pub restart: Option<String>,
    pub skip: Option<String>,
    pub rebuild: Option<String>,
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
    };
    let ann = ec.annotations();
    if let Some(v) = ann.get(RESTART).filter(|v| out.restart.as_ref() != Some(*v)) {
        match ops::restart(&ctx.pool, consumer, None).await {
            Ok(t) => {
                let shards: Vec<&str> = t.iter().map(|t| t.instance_id.as_str()).collect();
                events::on(ctx, ec, Reason::Restarted, format!("restarted dead shard(s) {}", shards.join(", "))).await;
            }
            Err(highwater::Error::Refused(m)) => events::on(ctx, ec, Reason::RestartRefused, m.to_string()).await,
            Err(e) => return Err(e.into()),
        }
        out.restart = Some(v.clone());
    }
    if let Some(v) = ann.get(SKIP).filter(|v| out.skip.as_ref() != Some(*v)) {
        match v.trim().parse::<i64>() {
            Err(_) => {
                events::on(ctx, ec, Reason::SkipInvalid, format!("{SKIP}: {v:?} is not an event id")).await;
            }
            Ok(id) => match ops::skip(&ctx.pool, consumer, None, Some(id)).await {
                Ok(t) => {
                    let shards: Vec<&str> = t.iter().map(|t| t.instance_id.as_str()).collect();
                    events::on(
                        ctx,
                        ec,
                        Reason::Skipped,
                        format!("skipped event {id} on shard(s) {}", shards.join(", ")),
                    )
                    .await;
                }
                Err(highwater::Error::Refused(m)) => events::on(ctx, ec, Reason::SkipMismatch, m.to_string()).await,
                Err(e) => return Err(e.into()),
            },
        }
        out.skip = Some(v.clone());
    }
    if let Some(v) = ann.get(REBUILD).filter(|v| out.rebuild.as_ref() != Some(*v)) {
        match ops::rebuild(&ctx.pool, consumer).await {
            Ok(r) => events::on(ctx, ec, Reason::Rebuilt, r.to_string()).await,
            Err(highwater::Error::Refused(m)) => events::on(ctx, ec, Reason::RebuildRefused, m.to_string()).await,
            Err(e) => return Err(e.into()),
        }
        out.rebuild = Some(v.clone());
    }
    Ok(out)
}
