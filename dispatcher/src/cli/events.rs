//! `highwater events …`
use clap::Subcommand;

use chrono::{DateTime, Utc};

use super::{Output, json_arg};
use crate::{Error, NewEvent, Result, events, partitions, retention};

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
        /// The version of the event type's schema the payload is written in (checked against
        /// that version's schema and recorded with the event); default: the type's latest.
        #[arg(long, value_name = "N")]
        schema_version: Option<i32>,
    },
    /// A stream's events in delivery order (version order for a versioned stream), for debugging
    /// and for loading an aggregate.
    Read {
        /// STREAM_TYPE/STREAM_ID (split at the first `/`; the id may contain more).
        #[arg(long)]
        stream: String,
        /// Only events created at or before this time (RFC 3339): the stream as it was then.
        #[arg(long, value_parser = parse_rfc3339, conflicts_with = "to_version")]
        as_of: Option<DateTime<Utc>>,
        /// Only events up to this stream version.
        #[arg(long)]
        to_version: Option<i64>,
        /// Payloads upcast to the latest version of their event type (as a consumer with
        /// `eventVersions: latest` gets them); default: as stored.
        #[arg(long)]
        latest: bool,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
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
        EventsCmd::Append {
            stream_type,
            stream_id,
            event_type,
            payload,
            metadata,
            tenant,
            expected_version,
            schema_version,
        } => {
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
            let id = match schema_version {
                Some(v) => events::append_version(&mut tx, &ev, v).await?,
                None => crate::append(&mut tx, &ev).await?,
            };
            tx.commit().await?;
            println!("{id}");
        }
        EventsCmd::Read { stream, as_of, to_version, latest, output } => {
            let Some((stream_type, stream_id)) = stream.split_once('/').filter(|(t, i)| !t.is_empty() && !i.is_empty())
            else {
                return Err(Error::refused(format!("--stream {stream:?} is not STREAM_TYPE/STREAM_ID"))
                    .with_fix("e.g. --stream order/o-17"));
            };
            let r = events::StreamRead {
                stream_type: stream_type.to_owned(),
                stream_id: stream_id.to_owned(),
                as_of,
                to_version,
                latest,
            };
            let evs = events::read_stream(pool, &r).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&evs)?),
                Output::Table => print!("{}", render_stream(&evs)),
            }
        }
        EventsCmd::Prune { older_than, stream_types, all_stream_types, batch_size, dry_run } => {
            let o = retention::PruneOptions {
                older_than_days: older_than,
                stream_types: (!all_stream_types).then_some(stream_types),
                batch_size,
                dry_run,
            };
            let run = highwater_ops::span::start("retention", &super::consumer::os_user(), None, format!("{o:?}"));
            let res = retention::prune(pool, &o).await;
            run.end(&res, ToString::to_string);
            println!("{}", res?);
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
            let run =
                highwater_ops::span::start("drop_partitions", &super::consumer::os_user(), None, format!("{o:?}"));
            let res = partitions::drop_old(pool, &o).await;
            run.end(&res, ToString::to_string);
            println!("{}", res?);
        }
    }
    Ok(())
}

fn parse_rfc3339(s: &str) -> std::result::Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| format!("{s:?} is not an RFC 3339 time (e.g. 2026-01-31T12:00:00Z)"))
}

/// One line per event; the payload as compact JSON, whole.
fn render_stream(evs: &[crate::Event]) -> String {
    use crate::table::{Align::*, render};
    let columns =
        [("ID", Right), ("VERSION", Right), ("TYPE", Left), ("TENANT", Left), ("CREATED AT", Left), ("PAYLOAD", Left)];
    render(
        0,
        &columns,
        evs.iter().map(|e| {
            vec![
                e.id.to_string(),
                e.stream_version.map_or("-".to_owned(), |v| v.to_string()),
                e.event_type.clone(),
                e.tenant_id.as_deref().unwrap_or("-").to_owned(),
                e.created_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                e.payload.get().to_owned(),
            ]
        }),
    )
}
