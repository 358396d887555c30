//! Rebuild: a read model reset and replayed from the first event, or bootstrapped from the
//! application's tables when events were pruned (`highwater_store::ops::rebuild` has the
//! statements; docs/consumers.md). The CLI asks nothing before it, and neither does this.
use highwater_store::ops::{self, Rebuilt};
use sqlx::PgPool;

use crate::{Audit, Operation, Question, Result};

#[derive(Debug, Clone)]
pub struct Rebuild {
    pub consumer: String,
}

impl Operation for Rebuild {
    const NAME: &'static str = "rebuild";
    type Preview = ();
    type Outcome = Rebuilt;
    /// Followed in `consumer status` (the rebuild's done / total), not here.
    type Progress = ();

    fn validate(&self, _: &Audit) -> Result<()> {
        Ok(())
    }

    async fn preview(&self, _: &PgPool) -> Result<()> {
        Ok(())
    }

    fn confirmation(&self, _: &()) -> Option<Question> {
        None
    }

    async fn execute(&self, pool: &PgPool, audit: &Audit) -> Result<Rebuilt> {
        let done = ops::rebuild(pool, &self.consumer, audit).await?;
        crate::audit::record(audit, &format!("eventconsumer/{}: {done}", self.consumer));
        Ok(done)
    }

    async fn progress(&self, _: &PgPool, _: &Rebuilt) -> Result<()> {
        Ok(())
    }
}
