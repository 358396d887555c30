//! `highwater consumer …`
use std::{path::PathBuf, time::Duration};

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};

use super::{Output, operation};
use crate::{Error, Result, definitions, ops};

#[derive(Subcommand, Debug)]
pub enum ConsumerCmd {
    /// A live view of every consumer and shard: status, lag, delivery rate (Ctrl-C quits).
    Top {
        /// Refresh interval.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        interval: std::time::Duration,
        /// Stop after this many screens (default: until Ctrl-C).
        #[arg(long)]
        iterations: Option<u64>,
    },
    /// Create or update consumers from EventConsumer YAML (a file or a directory).
    Apply {
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
    },
    /// Every shard with status, cursor and lag.
    List {
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// The shards of one consumer.
    Status {
        name: String,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Who restarted, skipped, disabled, enabled, rewound or rebuilt the consumer's shards, when
    /// and why (newest first; `highwater.shard_changes`).
    History {
        name: String,
        /// At most this many changes.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Events given up on (`errorMode: skip`) or skipped by an operator, with their errors.
    DeadLetters {
        /// Only this consumer's.
        name: Option<String>,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Deliver dead letters again through the consumer's sink (same idempotency key, tenant,
    /// role, correlation and causation; exactly once for a SQL sink). Each is kept and marked
    /// redriven with who, why and when; one that fails again stays a dead letter with the new
    /// error. The cursor and live delivery are untouched. A dispatcher of the consumer's group
    /// delivers them; this command waits for it (--wait).
    Redrive {
        name: String,
        /// This event's dead letter only (refused unless it is one that can be redriven).
        #[arg(long)]
        event: Option<i64>,
        /// Dead letters of events of this type.
        #[arg(long = "type")]
        event_type: Option<String>,
        /// Dead letters whose error contains this text.
        #[arg(long)]
        error_contains: Option<String>,
        /// Parked at or after this time (RFC 3339, or a duration ago such as 2h).
        #[arg(long, value_parser = parse_time)]
        since: Option<DateTime<Utc>>,
        /// Parked before this time (RFC 3339, or a duration ago such as 30m).
        #[arg(long, value_parser = parse_time)]
        until: Option<DateTime<Utc>>,
        /// Every dead letter of the consumer (that can be redriven).
        #[arg(long)]
        all: bool,
        /// Only this instance's dead letters.
        #[arg(long)]
        instance: Option<String>,
        /// Print how many and which, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// At most this many deliveries per second, e.g. 10/s.
        #[arg(long, value_parser = parse_rate)]
        rate: Option<f64>,
        /// Why, recorded on each dead letter.
        #[arg(long)]
        reason: Option<String>,
        /// Do not ask for confirmation (asked above 100 dead letters).
        #[arg(short, long)]
        yes: bool,
        /// How long to wait for the deliveries (0: return once requested). Exit code 0: all
        /// redriven; 1: some failed again (or refused); 2: some still pending at the end.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        wait: Duration,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Discard one dead letter: it is kept, marked with who, why and when, and never delivered
    /// (no redrive selection takes it). When it blocks its stream (`errorMode: skipStream`), the
    /// events parked behind it are requested for redrive in stream order, as after its redrive:
    /// the stream goes on without it. Refused for anything but an open dead letter that is not
    /// parked behind another.
    Discard {
        name: String,
        /// The event whose dead letter is discarded.
        #[arg(long)]
        event: i64,
        /// Only this instance's dead letter (a PerInstance consumer); default: every shard's.
        #[arg(long)]
        instance: Option<String>,
        /// Why, recorded on the dead letter.
        #[arg(long)]
        reason: String,
        /// Do not ask for confirmation (a command without a terminal needs it).
        #[arg(short, long)]
        yes: bool,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Deliver one stream's events to the consumer again (e.g. to rebuild one record of a read
    /// model that missed an event): through the path of a redrive (its sink, the same idempotency
    /// key, tenant, role, correlation and causation; exactly once per replayed event for a SQL
    /// sink), in stream order, only events at or below the shard's cursor and of the consumer's
    /// types. Recorded with who, why and when; the cursor and live delivery are untouched.
    Replay {
        name: String,
        /// The stream, TYPE/ID.
        #[arg(long)]
        stream: String,
        /// From this event of the stream on (by id; refused unless it is in the stream).
        #[arg(long)]
        since: Option<i64>,
        /// Print which events, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Why, recorded with each delivery.
        #[arg(long)]
        reason: Option<String>,
        /// Do not ask for confirmation (asked above 100 deliveries).
        #[arg(short, long)]
        yes: bool,
        /// How long to wait for the deliveries (0: return once requested). Exit code 0: all
        /// replayed; 1: some failed (or refused); 2: some still pending at the end.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        wait: Duration,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Delete a consumer and its cursors.
    Delete { name: String },
    /// Resume a dead shard: retry its failing event with a fresh attempt count (cursor kept).
    Restart {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Move past the failing event only (that one event is never delivered to this consumer).
    Skip {
        name: String,
        /// Refuse unless the shard is failing on this event.
        #[arg(long)]
        event: Option<i64>,
        #[command(flatten)]
        target: Target,
    },
    /// Stop delivering (cursor kept, nothing lost; `events prune` no longer waits for it).
    Disable {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Resume disabled shards from their cursors.
    Enable {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Move the cursor: redeliver from the start, an event or a time, or jump to the head. A time
    /// to come is refused; a time or event that moves the cursor forward past undelivered events
    /// says how many and asks (--yes: skip them without asking).
    Rewind {
        name: String,
        /// earliest, latest, an event id (redelivered from that event), or an RFC 3339 time.
        #[arg(long, value_parser = |s: &str| s.parse::<ops::RewindTo>().map_err(|e| e.to_string()))]
        to: ops::RewindTo,
        /// Skip the undelivered events between the cursor and the target without asking (a
        /// command without a terminal needs it).
        #[arg(short, long)]
        yes: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Rebuild a read model: run `sink.sql.reset` and replay every event, in one transaction with
    /// the cursor's rewind (refused when events it needs were pruned, unless it declares
    /// `sink.sql.bootstrap`, which then refills it instead). Progress: `consumer status`.
    Rebuild {
        name: String,
        /// Why, recorded with who in `highwater.shard_changes`.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Run `sink.sql.bootstrap` now (one that failed at creation, or a refill from the tables).
    Bootstrap { name: String },
    /// Wait until the consumer has applied every event it selects of the transactions a token
    /// covers (read-your-writes). Exit code 0: applied; 2: timed out; 1: refused (bad input).
    Wait {
        name: String,
        /// The token of the write: `highwater.token()` (or the token `append_position` returned).
        #[arg(long)]
        after: String,
        /// How long to wait (at most 5m; 0 looks once).
        #[arg(long, default_value = "5s")]
        timeout: String,
        /// One instance of a PerInstance consumer (default: every instance).
        #[arg(long)]
        instance: Option<String>,
    },
    /// Delete PerInstance shards whose heartbeat is older than --stale-after (never __shared__).
    Gc {
        /// Only this consumer's shards.
        name: Option<String>,
        /// Heartbeat age beyond which an instance counts as gone (e.g. 1h; at least 1m).
        #[arg(long, value_parser = humantime::parse_duration)]
        stale_after: Duration,
        /// Only this instance's shards.
        #[arg(long)]
        instance: Option<String>,
        /// Also delete shards with a pod_uid (created by the operator for a pod).
        #[arg(long)]
        include_managed: bool,
    },
}

#[derive(Args, Debug)]
pub struct Target {
    /// Only this instance's shard (default: the __shared__ shard of a Shared consumer, every
    /// shard the command applies to of a PerInstance one).
    #[arg(long)]
    pub instance: Option<String>,
    /// Why, recorded with who in `highwater.shard_changes` (the console shows it).
    #[arg(long)]
    pub reason: Option<String>,
    /// `json`: one array of the changes made, for scripts.
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: Output,
}

pub async fn run(pool: &sqlx::PgPool, c: ConsumerCmd) -> Result<()> {
    match c {
        ConsumerCmd::Apply { file } => {
            let defs = definitions::load(&file)?;
            if defs.is_empty() {
                return Err(Error::refused(format!("{} holds no EventConsumer", file.display())));
            }
            for (name, outcome) in definitions::apply(pool, &defs).await? {
                let word = match outcome {
                    definitions::Applied::Created => "created",
                    definitions::Applied::Updated => "configured",
                    definitions::Applied::Unchanged => "unchanged",
                };
                println!("eventconsumer/{name} {word}");
            }
        }
        ConsumerCmd::Top { interval, iterations } => {
            let opts = super::top::TopOptions { interval, iterations };
            super::top::run(pool, opts, crate::shutdown::shutdown_signal()).await?;
        }
        ConsumerCmd::List { output } => print_status(&ops::status(pool, None).await?, output)?,
        ConsumerCmd::Status { name, output } => {
            let rows = ops::status(pool, Some(&name)).await?;
            if rows.is_empty() {
                if highwater_store::definitions::exists(pool, &name).await? {
                    println!("consumer {name} has no shards yet: no dispatcher of its group has started");
                    return Ok(());
                }
                return Err(Error::no_consumer(&name));
            }
            print_status(&rows, output)?;
        }
        ConsumerCmd::DeadLetters { name, output } => {
            let rows = ops::dead_letters(pool, name.as_deref()).await?;
            match output {
                Output::Table => print!("{}", crate::render::render_dead_letters(&rows)),
                Output::Json => println!("{}", to_json(&rows)?),
            }
        }
        ConsumerCmd::Redrive {
            name,
            event,
            event_type,
            error_contains,
            since,
            until,
            all,
            instance,
            dry_run,
            rate,
            reason,
            yes,
            wait,
            output,
        } => {
            let selection = ops::redrive::Selection {
                consumer: name,
                instance,
                event,
                event_type,
                error_contains,
                since,
                until,
                all,
            };
            let op = highwater_ops::Redrive { selection, rate };
            let audit = highwater_ops::Audit { by: os_user(), reason };
            if let Some(plan) = operation::run(pool, &op, &audit, dry_run, yes, output).await? {
                operation::follow(pool, &op, plan, wait, output).await?;
            }
        }
        ConsumerCmd::Discard { name, event, instance, reason, yes, output } => {
            let op = highwater_ops::Discard { consumer: name, event, instance };
            let audit = highwater_ops::Audit { by: os_user(), reason: Some(reason) };
            super::discard::run(pool, &op, &audit, yes, output).await?;
        }
        ConsumerCmd::Replay { name, stream, since, dry_run, reason, yes, wait, output } => {
            let op = highwater_ops::Replay { consumer: name, stream, since };
            let audit = highwater_ops::Audit { by: os_user(), reason };
            if let Some(plan) = operation::run(pool, &op, &audit, dry_run, yes, output).await? {
                operation::follow(pool, &op, plan, wait, output).await?;
            }
        }
        ConsumerCmd::Delete { name } => {
            definitions::delete(pool, &name).await?;
            println!("eventconsumer/{name} deleted");
        }
        ConsumerCmd::Restart { name, target } => {
            print_changes(&change(pool, name, &target, highwater_ops::Change::Restart, false).await?, target.output)?
        }
        ConsumerCmd::Skip { name, event, target } => {
            let c = highwater_ops::Change::Skip { event };
            print_changes(&change(pool, name, &target, c, false).await?, target.output)?
        }
        ConsumerCmd::Disable { name, target } => {
            print_changes(&change(pool, name, &target, highwater_ops::Change::Disable, false).await?, target.output)?
        }
        ConsumerCmd::Enable { name, target } => {
            print_changes(&change(pool, name, &target, highwater_ops::Change::Enable, false).await?, target.output)?
        }
        ConsumerCmd::Rewind { name, to, yes, target } => {
            let c = highwater_ops::Change::Rewind { to };
            print_changes(&change(pool, name, &target, c, yes).await?, target.output)?
        }
        ConsumerCmd::History { name, limit, output } => {
            let rows = ops::shard_changes(pool, &name, limit).await?;
            // A deleted consumer's history is kept: refused only when there is nothing to show.
            if rows.is_empty() && !definitions::exists(pool, &name).await? {
                return Err(Error::no_consumer(&name));
            }
            match output {
                Output::Table if rows.is_empty() => println!("no shard changes recorded for consumer {name}"),
                Output::Table => print!("{}", crate::render::render_shard_changes(&rows)),
                Output::Json => println!("{}", to_json(&rows)?),
            }
        }
        ConsumerCmd::Rebuild { name, reason } => {
            let op = highwater_ops::Rebuild { consumer: name.clone() };
            let audit = highwater_ops::Audit { by: os_user(), reason };
            let done = highwater_ops::execute(&op, pool, &audit, highwater_ops::Confirm::Given).await?;
            println!("eventconsumer/{name}: {done}")
        }
        ConsumerCmd::Bootstrap { name } => {
            println!("eventconsumer/{name}: {}", ops::Rebuilt::Bootstrapped(ops::bootstrap(pool, &name).await?))
        }
        ConsumerCmd::Wait { name, after, timeout, instance } => {
            let token: crate::Token = after.parse()?;
            let timeout = crate::wait::parse_timeout(&timeout)?;
            match crate::wait_applied_on(pool, &name, instance.as_deref(), token, timeout).await? {
                crate::Waited::Applied => println!("consumer {name} has applied token {token}"),
                crate::Waited::TimedOut { pending } => {
                    eprintln!(
                        "timed out after {}: consumer {name} has not applied token {token} yet ({pending})",
                        humantime::format_duration(timeout)
                    );
                    // Distinct from a refusal (1): scripts retry on 2.
                    std::process::exit(2);
                }
            }
        }
        ConsumerCmd::Gc { name, stale_after, instance, include_managed } => {
            let o = ops::GcOptions { stale_after, consumer: name, instance, include_managed };
            let report = ops::gc(pool, &o).await?;
            print_all(&report.deleted);
            if report.deleted.is_empty() {
                println!("no stale shards (heartbeat older than {})", humantime::format_duration(stale_after));
            }
            if !report.kept_managed.is_empty() {
                println!(
                    "kept {} stale shard(s) managed by the operator (pod_uid set): {}; --include-managed deletes them",
                    report.kept_managed.len(),
                    report.kept_managed.join(", ")
                );
            }
        }
    }
    Ok(())
}

fn print_status(rows: &[ops::ShardStatus], output: Output) -> Result<()> {
    match output {
        Output::Table => print!("{}", crate::render::render_table(rows)),
        Output::Json => println!("{}", to_json(rows)?),
    }
    Ok(())
}

fn print_changes(changes: &[ops::Transition], output: Output) -> Result<()> {
    match output {
        Output::Table => print_all(changes),
        Output::Json => println!("{}", to_json(changes)?),
    }
    Ok(())
}

fn print_all<T: std::fmt::Display>(changes: impl IntoIterator<Item = T>) {
    for c in changes {
        println!("{c}");
    }
}

fn to_json<T: serde::Serialize>(rows: &[T]) -> Result<String> {
    Ok(serde_json::to_string_pretty(rows)?)
}

/// A redrive or replay of more deliveries than this asks first.
pub use highwater_ops::CONFIRM_ABOVE as REDRIVE_CONFIRM_ABOVE;

/// restart, skip, disable, enable, rewind: the operation the console runs too
/// (`highwater_ops::ShardChange`). Only a rewind that moves a cursor forward past undelivered
/// events asks (`latest` says so by name, `--yes` has answered); without a terminal it is refused
/// with the count.
async fn change(
    pool: &sqlx::PgPool,
    consumer: String,
    target: &Target,
    change: highwater_ops::Change,
    yes: bool,
) -> Result<Vec<ops::Transition>> {
    let op = highwater_ops::ShardChange { consumer, instance: target.instance.clone(), change };
    let audit = highwater_ops::Audit { by: os_user(), reason: target.reason.clone() };
    let on_terminal = |q: &highwater_ops::Question| {
        ask(&q.question, (&q.why, "check the target (a mistyped date or id?); pass --yes to skip them on purpose"))
            .map_err(highwater_ops::Error::from)
    };
    let confirm = if yes { highwater_ops::Confirm::Given } else { highwater_ops::Confirm::Ask(&on_terminal) };
    Ok(highwater_ops::execute(&op, pool, &audit, confirm).await?)
}

/// Asks `question` on a terminal; without one, refuses with `(why, fix)`.
pub(super) fn ask(question: &str, (why, fix): (&str, &str)) -> Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(Error::refused(format!("{question}: {why}")).with_fix(fix));
    }
    print!("{question}? Type yes to go on: ");
    std::io::stdout().flush().map_err(Error::io("stdout"))?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(Error::io("stdin"))?;
    if answer.trim() != "yes" {
        return Err(Error::refused("not confirmed; nothing changed"));
    }
    Ok(())
}

/// Who runs this command, as recorded on each dead letter: the OS user.
pub(super) fn os_user() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => u.name,
        _ => std::env::var("USER").unwrap_or_else(|_| format!("uid {uid}")),
    }
}

/// An RFC 3339 time, or a duration before now.
fn parse_time(s: &str) -> std::result::Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    let ago = humantime::parse_duration(s)
        .map_err(|_| format!("{s:?} is neither an RFC 3339 time (2026-01-31T12:00:00Z) nor a duration ago (2h)"))?;
    let ago = chrono::Duration::from_std(ago).map_err(|e| e.to_string())?;
    Ok(Utc::now() - ago)
}

/// `N/s` or `N`: deliveries per second.
fn parse_rate(s: &str) -> std::result::Result<f64, String> {
    let n = s.strip_suffix("/s").unwrap_or(s);
    match n.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("{s:?} is not a rate such as 10/s")),
    }
}
