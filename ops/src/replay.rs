//! Replay: one stream's events delivered again to one consumer
//! (`highwater_store::ops::replay` has the statements; docs/consumers.md, "Replay").
use highwater_store::ops::replay::{self, Plan, Progress};
use sqlx::PgPool;

use crate::{Audit, CONFIRM_ABOVE, Operation, Progressing, Question, Result};

#[derive(Debug, Clone, Default)]
pub struct Replay {
    pub consumer: String,
    /// `TYPE/ID`.
    pub stream: String,
    /// From this event of the stream on.
    pub since: Option<i64>,
}

impl Replay {
    fn request(&self, audit: &Audit, dry_run: bool) -> replay::Request {
        replay::Request {
            consumer: self.consumer.clone(),
            stream: self.stream.clone(),
            since: self.since,
            by: audit.by.clone(),
            reason: audit.reason.clone(),
            dry_run,
        }
    }
}

impl Operation for Replay {
    const NAME: &'static str = "replay";
    type Preview = Plan;
    type Outcome = Plan;
    type Progress = Progress;

    fn validate(&self, _: &Audit) -> Result<()> {
        replay::parse_stream(&self.stream)?;
        Ok(())
    }

    async fn preview(&self, pool: &PgPool) -> Result<Plan> {
        Ok(replay::replay(pool, &self.request(&Audit::default(), true)).await?)
    }

    fn confirmation(&self, p: &Plan) -> Option<Question> {
        let n = p.selected.len();
        (n > CONFIRM_ABOVE).then(|| Question {
            question: format!("replay {n} events of stream {} to consumer {}", p.stream, p.consumer),
            why: format!("more than {CONFIRM_ABOVE} need a confirmation"),
            dry_run_first: true,
        })
    }

    async fn execute(&self, pool: &PgPool, audit: &Audit) -> Result<Plan> {
        Ok(replay::replay(pool, &self.request(audit, false)).await?)
    }

    async fn progress(&self, pool: &PgPool, plan: &Plan) -> Result<Progress> {
        Ok(replay::progress(pool, plan).await?)
    }
}

impl Progressing for Progress {
    fn pending(&self) -> u64 {
        self.pending
    }

    fn failed(&self) -> &[(i64, String)] {
        &self.failed
    }
}
