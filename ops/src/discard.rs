//! Discard: a dead letter never delivered, the events parked behind it released
//! (`highwater_store::ops::discard` has the statements; docs/consumers.md, "Per-stream order").
use highwater_store::ops::discard::{self, Discarded};
use sqlx::PgPool;

use crate::{Audit, Operation, Question, Result};

#[derive(Debug, Clone, Default)]
pub struct Discard {
    pub consumer: String,
    pub event: i64,
    /// Only this instance's dead letter; `None`: every shard's dead letter of the event.
    pub instance: Option<String>,
}

impl Operation for Discard {
    const NAME: &'static str = "discard";
    /// Nothing is read before the question: a discarded event is one the consumer never sees,
    /// which no command takes back, so it is asked whatever the database holds.
    type Preview = ();
    type Outcome = Discarded;
    /// Done as it is requested (the released events are redrives, followed as such).
    type Progress = ();

    /// A reason is required: the audit says why an event was never delivered.
    fn validate(&self, audit: &Audit) -> Result<()> {
        Ok(discard::check_reason(audit.reason.as_deref().unwrap_or_default())?)
    }

    async fn preview(&self, _: &PgPool) -> Result<()> {
        Ok(())
    }

    fn confirmation(&self, _: &()) -> Option<Question> {
        Some(Question {
            question: format!(
                "discard the dead letter of event {} of consumer {} (never delivered)",
                self.event, self.consumer
            ),
            why: "needs a confirmation".into(),
            dry_run_first: false,
        })
    }

    async fn execute(&self, pool: &PgPool, audit: &Audit) -> Result<Discarded> {
        let request = discard::Request {
            consumer: self.consumer.clone(),
            event: self.event,
            instance: self.instance.clone(),
            by: audit.by.clone(),
            reason: audit.reason.clone().unwrap_or_default(),
        };
        Ok(discard::discard(pool, &request).await?)
    }

    async fn progress(&self, _: &PgPool, _: &Discarded) -> Result<()> {
        Ok(())
    }
}
