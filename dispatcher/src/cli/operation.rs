//! How the command line drives an operation of `highwater_ops` (redrive, replay, discard): the
//! flow is the crate's (`highwater_ops::run`); this file asks on the terminal, prints the plan,
//! follows the deliveries (`--wait`) and turns the end into the exit code (0 done, 1 refused or
//! failed, [`highwater_ops::EXIT_PENDING`] still pending). What each operation prints is its
//! [`Shown`] impl, beside its flags' parsing.
use std::time::Duration;

use highwater_ops::{Audit, Confirm, Operation, Progressing, Question, Ran};
use serde::Serialize;

use super::{Output, consumer::ask};
use crate::{Error, Result};

/// What the CLI prints of an operation when it runs.
pub(super) trait Shown: Operation {
    /// The table of a dry run (`dry_run`) or of what was requested.
    fn render_preview(preview: &Self::Preview) -> String;
    fn render_outcome(outcome: &Self::Outcome) -> String;
}

/// What the CLI prints of the deliveries an operation requested (redrive, replay), followed
/// with `--wait`.
pub(super) trait Followed: Shown {
    /// The consumer it acts on (named in the progress lines).
    fn consumer(&self) -> &str;
    /// One failed delivery of the progress.
    fn failed_line(id: i64, error: &str) -> String;
    /// `eventconsumer/c: 3 redriven, 0 failed again, 1 pending`
    fn summary(&self, progress: &Self::Progress) -> String;
    /// The error of a run whose deliveries failed (`failed` of `selected`).
    fn failed(&self, failed: usize, selected: usize) -> Error;
    /// How many deliveries the outcome requested.
    fn selected(outcome: &Self::Outcome) -> usize;
}

/// Validates, previews, asks (unless `yes`), executes; prints the dry run's preview, or in a
/// table what was requested. `None` after a dry run.
pub(super) async fn run<O: Shown>(
    pool: &sqlx::PgPool,
    op: &O,
    audit: &Audit,
    dry_run: bool,
    yes: bool,
    output: Output,
) -> Result<Option<O::Outcome>> {
    let on_terminal = |q: &Question| {
        let fix = if q.dry_run_first { "check them with --dry-run, then pass --yes" } else { "pass --yes" };
        ask(&q.question, (&q.why, fix)).map_err(highwater_ops::Error::from)
    };
    let confirm = if yes { Confirm::Given } else { Confirm::Ask(&on_terminal) };
    match highwater_ops::run(op, pool, audit, dry_run, confirm).await? {
        Ran::Previewed(p) => {
            match output {
                Output::Table => print!("{}", O::render_preview(&p)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&p)?),
            }
            Ok(None)
        }
        Ran::Executed(o) => {
            if output == Output::Table {
                print!("{}", O::render_outcome(&o));
            }
            Ok(Some(o))
        }
    }
}

/// Follows the deliveries of `outcome` for up to `wait` (0: reads them once) and prints where
/// they stand; some failed: an error (exit 1); some pending after a wait: exit 2.
pub(super) async fn follow<O: Followed>(
    pool: &sqlx::PgPool,
    op: &O,
    outcome: O::Outcome,
    wait: Duration,
    output: Output,
) -> Result<()>
where
    O::Outcome: Serialize,
{
    let progress = highwater_ops::wait(op, pool, &outcome, wait).await?;
    match output {
        Output::Table => {
            for (id, error) in progress.failed() {
                let error: String = error.replace(['\n', '\r'], " ").chars().take(200).collect();
                println!("{}", O::failed_line(*id, &error));
            }
            println!("{}", op.summary(&progress));
        }
        Output::Json => {
            let both = serde_json::json!({ "plan": outcome, "progress": progress });
            println!("{}", serde_json::to_string_pretty(&both)?);
        }
    }
    if !progress.failed().is_empty() {
        return Err(op.failed(progress.failed().len(), O::selected(&outcome)));
    }
    if progress.pending() > 0 && !wait.is_zero() {
        eprintln!(
            "{} still pending after {}: no dispatcher of the consumer's group has delivered them yet (is one \
             running, and the shard idle or processing? `highwater consumer status {}`)",
            progress.pending(),
            humantime::format_duration(wait),
            op.consumer()
        );
        std::process::exit(i32::from(highwater_ops::EXIT_PENDING));
    }
    Ok(())
}
