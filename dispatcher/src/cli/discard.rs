//! `highwater consumer discard NAME --event ID --reason TEXT [--yes]`: a dead letter that is
//! never to be delivered, and the events of its stream parked behind it released
//! (`highwater_ops::Discard`).
use highwater_ops::{Audit, Discard, discard_rows::Discarded};

use super::{
    Output,
    operation::{self, Shown},
};
use crate::Result;

/// Asked on a terminal before anything is read (the operation previews nothing); refused
/// without one unless --yes.
pub async fn run(pool: &sqlx::PgPool, op: &Discard, audit: &Audit, yes: bool, output: Output) -> Result<()> {
    if let Some(d) = operation::run(pool, op, audit, false, yes, output).await?
        && output == Output::Json
    {
        println!("{}", serde_json::to_string_pretty(&d)?);
    }
    Ok(())
}

impl Shown for Discard {
    /// No dry run: nothing to show.
    fn render_preview(_: &()) -> String {
        String::new()
    }

    fn render_outcome(d: &Discarded) -> String {
        render(d)
    }
}

fn render(d: &Discarded) -> String {
    let mut out = format!(
        "eventconsumer/{}: dead letter of event {} discarded (instance {}); it is never delivered\n",
        d.consumer,
        d.event_id,
        d.instances.join(", ")
    );
    if d.released.is_empty() {
        out.push_str("no event was parked behind it\n");
    } else {
        let ids: Vec<String> = d.released.iter().map(i64::to_string).collect();
        out.push_str(&format!(
            "released, requested for redrive in stream order: {} (a dispatcher delivers them; `highwater consumer dead-letters {}` shows them)\n",
            ids.join(", "),
            d.consumer
        ));
    }
    out
}
