//! `highwater events …`
use clap::Subcommand;

use super::json_arg;
use crate::{NewEvent, Result};

#[derive(Subcommand, Debug)]
pub enum EventsCmd {
    /// Append one event (in its own transaction).
    Append {
        #[arg(long)]
        stream_type: String,
        #[arg(long)]
        stream_id: String,
        #[arg(long = "type")]
        event_type: String,
        /// JSON payload, or @FILE.
        #[arg(long)]
        payload: String,
        /// JSON object of metadata, or @FILE.
        #[arg(long)]
        metadata: Option<String>,
        #[arg(long)]
        tenant: Option<String>,
        /// The stream's current version (0 for a new stream); refused on mismatch.
        #[arg(long)]
        expected_version: Option<i64>,
    },
}

pub async fn run(pool: &sqlx::PgPool, c: EventsCmd) -> Result<()> {
    match c {
        EventsCmd::Append { stream_type, stream_id, event_type, payload, metadata, tenant, expected_version } => {
            let ev = NewEvent {
                stream_type,
                stream_id,
                event_type,
                payload: json_arg(&payload, "--payload")?,
                metadata: metadata.as_deref().map(|m| json_arg(m, "--metadata")).transpose()?,
                tenant_id: tenant,
                expected_version,
            };
            let mut tx = pool.begin().await?;
            let id = crate::append(&mut tx, &ev).await?;
            tx.commit().await?;
            println!("{id}");
        }
    }
    Ok(())
}
