//! The shard transitions an operator asks for (`consumer restart|skip|disable|enable|rewind`) as
//! one operation: the statements are the store's (`highwater_store::ops::{transitions, rewind}`),
//! the flow and the question are here, so the CLI and the console ask the same thing. Only a
//! rewind that moves a cursor forward past undelivered events asks (the CLI's `--yes`); `latest`
//! skips them by name and does not.
use highwater_store::ops::{self, RewindTo, Skipped, Transition};
use serde::Serialize;
use sqlx::PgPool;

use crate::{Audit, Operation, Question, Result};

/// What happens to the shards in scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "lowercase")]
pub enum Change {
    /// Dead shards resume; the failing event is tried again with a fresh attempt count.
    Restart,
    /// Past the failing event (only that one, when `event` is given); it is parked as a dead letter.
    Skip { event: Option<i64> },
    /// Nothing is delivered; the cursor stays.
    Disable,
    /// Disabled shards resume from their cursors.
    Enable,
    /// The cursors go to `to`; failures are cleared.
    Rewind {
        #[serde(serialize_with = "as_text")]
        to: RewindTo,
    },
}

fn as_text<S: serde::Serializer>(to: &RewindTo, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(to)
}

impl Change {
    /// The CLI's verb: `restart`, `skip`, …
    pub fn verb(&self) -> &'static str {
        match self {
            Change::Restart => "restart",
            Change::Skip { .. } => "skip",
            Change::Disable => "disable",
            Change::Enable => "enable",
            Change::Rewind { .. } => "rewind",
        }
    }
}

/// One consumer's shards (one instance's, with `instance`) changed as `change` says.
#[derive(Debug, Clone)]
pub struct ShardChange {
    pub consumer: String,
    pub instance: Option<String>,
    pub change: Change,
}

impl Operation for ShardChange {
    const NAME: &'static str = "shard_change";
    /// For a rewind, the undelivered events it would move each cursor past; empty otherwise.
    type Preview = Vec<Skipped>;
    type Outcome = Vec<Transition>;
    /// Done as it is requested: the dispatchers see the change at once (`highwater_control`).
    type Progress = ();

    fn validate(&self, _: &Audit) -> Result<()> {
        Ok(())
    }

    async fn preview(&self, pool: &PgPool) -> Result<Vec<Skipped>> {
        Ok(match self.change {
            Change::Rewind { to } if to != RewindTo::Latest => {
                ops::rewind_skips(pool, &self.consumer, self.instance.as_deref(), to).await?
            }
            _ => Vec::new(),
        })
    }

    fn confirmation(&self, skipped: &Vec<Skipped>) -> Option<Question> {
        let Change::Rewind { to } = self.change else { return None };
        (!skipped.is_empty()).then(|| Question {
            question: format!(
                "rewind consumer {} to {to}, skipping {}, which are never delivered",
                self.consumer,
                ops::describe_skips(skipped)
            ),
            why: "moving a cursor forward past undelivered events needs a confirmation".into(),
            dry_run_first: false,
        })
    }

    /// Executed only once confirmed (or asked nothing): a rewind moves past what it skips.
    async fn execute(&self, pool: &PgPool, audit: &Audit) -> Result<Vec<Transition>> {
        let (c, i) = (self.consumer.as_str(), self.instance.as_deref());
        let done = match self.change {
            Change::Restart => ops::restart(pool, c, i, audit).await?,
            Change::Skip { event } => ops::skip(pool, c, i, event, audit).await?,
            Change::Disable => ops::disable(pool, c, i, audit).await?,
            Change::Enable => ops::enable(pool, c, i, audit).await?,
            Change::Rewind { to } => ops::rewind_skipping(pool, c, i, to, audit).await?,
        };
        for t in &done {
            crate::audit::record(audit, &t.to_string());
        }
        Ok(done)
    }

    async fn progress(&self, _: &PgPool, _: &Vec<Transition>) -> Result<()> {
        Ok(())
    }
}
