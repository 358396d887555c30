//! `highwater consumer discard NAME --event ID --reason TEXT [--yes]`: a dead letter that is
//! never to be delivered, and the events of its stream parked behind it released
//! (`crate::ops::discard`).
use super::Output;
use crate::{Result, ops::discard};

pub async fn run(pool: &sqlx::PgPool, request: discard::Request, yes: bool, output: Output) -> Result<()> {
    // Asked before anything is read: a discarded event is one the consumer never sees, which no
    // command takes back.
    if !yes {
        confirm(&request)?;
    }
    let d = discard::discard(pool, &request).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&d)?),
        Output::Table => print!("{}", render(&d)),
    }
    Ok(())
}

fn render(d: &discard::Discarded) -> String {
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

/// Asks on a terminal; refuses without one (scripts pass --yes).
fn confirm(r: &discard::Request) -> Result<()> {
    let question = format!("discard the dead letter of event {} of consumer {} (never delivered)", r.event, r.consumer);
    super::consumer::ask(&question, ("needs a confirmation", "pass --yes"))
}
