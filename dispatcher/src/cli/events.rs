//! `highwater events …`
use clap::Subcommand;

use super::json_arg;
use crate::{NewEvent, Result, partitions, retention};

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
    /// Delete old events of the named stream types, in batches; refused while a non-disabled
    /// shard has not processed them.
    Prune {
        /// Delete events created more than this many days ago.
        #[arg(long, value_name = "DAYS")]
        older_than: u32,
        /// A stream type to prune (repeatable; several values allowed).
        #[arg(long = "stream-type", value_name = "T", num_args = 1.., conflicts_with = "all_stream_types")]
        stream_types: Vec<String>,
        /// Prune every stream type.
        #[arg(long)]
        all_stream_types: bool,
        /// Events deleted per transaction.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
        batch_size: i64,
        /// Show what would be deleted (and whether it is blocked); delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List the partitions of highwater.events (ranges of transaction ids); with --create, first
    /// create the ones missing ahead of the next transaction id (dispatchers do this every minute).
    Partitions {
        #[arg(long)]
        create: bool,
    },
    /// Drop whole partitions, oldest first, whose events are all older than DAYS and processed by
    /// every non-disabled shard; refused (naming the shards) otherwise. Every stream type.
    DropPartitions {
        /// Drop partitions whose newest event was created more than this many days ago.
        #[arg(long, value_name = "DAYS")]
        older_than: u32,
        /// Show what would be dropped (and whether it is blocked); drop nothing.
        #[arg(long)]
        dry_run: bool,
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
        EventsCmd::Prune { older_than, stream_types, all_stream_types, batch_size, dry_run } => {
            let o = retention::PruneOptions {
                older_than_days: older_than,
                stream_types: (!all_stream_types).then_some(stream_types),
                batch_size,
                dry_run,
            };
            println!("{}", retention::prune(pool, &o).await?);
        }
        EventsCmd::Partitions { create } => {
            if create {
                println!("created {} partition(s)", partitions::create_ahead(pool).await?);
            }
            for p in partitions::list(pool).await? {
                println!("{}\ttransaction ids {}..{}", p.name, p.lo, p.hi);
            }
        }
        EventsCmd::DropPartitions { older_than, dry_run } => {
            let o = partitions::DropOptions { older_than_days: older_than, dry_run };
            println!("{}", partitions::drop_old(pool, &o).await?);
        }
    }
    Ok(())
}
