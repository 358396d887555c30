//! The one shape of an operation and the one flow that drives it. A front end parses its input
//! into an operation and an [`Audit`] (who asks and why), says how a confirmation is answered
//! ([`Confirm`]), calls [`run`], and renders what comes back; [`wait`] follows the progress of
//! the deliveries a dispatcher makes for it.
use std::{future::Future, time::Duration};

use serde::Serialize;
use sqlx::PgPool;

use crate::{Error, Result};

/// Who asks and why, recorded with every row an operation changes (the store's, so that its
/// statements record it in the transaction of the change).
pub use highwater_store::ops::Audit;

/// What an operation asks before it executes, and why it asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// `redrive 120 dead letters of consumer c`
    pub question: String,
    /// `more than 100 need a confirmation`
    pub why: String,
    /// Whether a dry run shows what it takes (the front end's fix names it).
    pub dry_run_first: bool,
}

/// How the front end answers a [`Question`].
pub enum Confirm<'a> {
    /// Answered before it was asked: `--yes`, `"yes": true`, an annotation (its own
    /// confirmation). Nothing is previewed.
    Given,
    /// Not given: refused with `<question>: <why>` and this fix (HTTP: send `"yes": true`).
    Refuse { fix: &'a str },
    /// Asked (the CLI on a terminal); an error refuses.
    Ask(&'a (dyn Fn(&Question) -> Result<()> + Sync)),
}

/// validate → preview → confirm above a threshold → execute → progress. The statements are the
/// store's; an operation says which, and when to ask.
pub trait Operation: Sync + std::fmt::Debug {
    /// The operation's name in its run's span (`highwater {NAME}`): `redrive`, `shard_change`, …
    const NAME: &'static str;

    /// What would be done, nothing changed (a dry run's answer).
    type Preview: Serialize + Send;
    /// What was requested.
    type Outcome: Serialize + Send + Sync;
    /// Where the requested deliveries stand.
    type Progress: Serialize + Send + Progressing;

    /// Refuses, before the database is asked, a request that cannot apply.
    fn validate(&self, audit: &Audit) -> Result<()>;

    /// Selects what the operation takes; nothing is changed.
    fn preview(&self, pool: &PgPool) -> impl Future<Output = Result<Self::Preview>> + Send;

    /// The question to ask before executing what `preview` selected; `None`: it goes ahead.
    fn confirmation(&self, preview: &Self::Preview) -> Option<Question>;

    fn needs_confirmation(&self, preview: &Self::Preview) -> bool {
        self.confirmation(preview).is_some()
    }

    /// Does it, recording `audit` with every row it changes.
    fn execute(&self, pool: &PgPool, audit: &Audit) -> impl Future<Output = Result<Self::Outcome>> + Send;

    fn progress(&self, pool: &PgPool, outcome: &Self::Outcome) -> impl Future<Output = Result<Self::Progress>> + Send;
}

/// Deliveries still to be made, and those that failed.
pub trait Progressing {
    fn pending(&self) -> u64;
    /// `(event id, error)` of each that failed.
    fn failed(&self) -> &[(i64, String)];
}

/// What [`run`] did.
#[derive(Debug)]
pub enum Ran<P, O> {
    /// A dry run: what it would do.
    Previewed(P),
    Executed(O),
}

/// The flow of every operation for every front end: a dry run's preview, or the outcome of
/// [`execute`].
pub async fn run<O: Operation>(
    op: &O,
    pool: &PgPool,
    audit: &Audit,
    dry_run: bool,
    confirm: Confirm<'_>,
) -> Result<Ran<O::Preview, O::Outcome>> {
    if dry_run {
        op.validate(audit)?;
        return Ok(Ran::Previewed(op.preview(pool).await?));
    }
    Ok(Ran::Executed(execute(op, pool, audit, confirm).await?))
}

/// Validates, asks what the preview makes the operation ask (unless [`Confirm::Given`]), and
/// executes: [`run`] without a dry run, for a front end that has none (an annotation).
pub async fn execute<O: Operation>(op: &O, pool: &PgPool, audit: &Audit, confirm: Confirm<'_>) -> Result<O::Outcome> {
    op.validate(audit)?;
    if !matches!(confirm, Confirm::Given) {
        let preview = op.preview(pool).await?;
        if let Some(q) = op.confirmation(&preview) {
            match confirm {
                Confirm::Given => {}
                Confirm::Refuse { fix } => return Err(Error::refused(format!("{}: {}", q.question, q.why), fix)),
                Confirm::Ask(ask) => ask(&q)?,
            }
        }
    }
    let run = crate::span::start(O::NAME, &audit.by, audit.reason.as_deref(), format!("{op:?}"));
    let res = op.execute(pool, audit).await;
    run.end(&res, |o| serde_json::to_string(o).unwrap_or_default());
    res
}

/// Polls the progress of `outcome` until nothing is pending or `timeout` has passed (a zero
/// timeout reads it once).
pub async fn wait<O: Operation>(op: &O, pool: &PgPool, outcome: &O::Outcome, timeout: Duration) -> Result<O::Progress> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let p = op.progress(pool, outcome).await?;
        if p.pending() == 0 || tokio::time::Instant::now() >= deadline {
            return Ok(p);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An operation done as it is requested (a discard): nothing pending, nothing failed.
impl Progressing for () {
    fn pending(&self) -> u64 {
        0
    }

    fn failed(&self) -> &[(i64, String)] {
        &[]
    }
}
