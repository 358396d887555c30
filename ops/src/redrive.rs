//! Redrive: dead letters delivered again through their consumer's sink
//! (`highwater_store::ops::redrive` has the statements; docs/consumers.md, "Redrive").
use highwater_store::ops::redrive::{self, Plan, Progress, Selection};
use sqlx::PgPool;

use crate::{Audit, CONFIRM_ABOVE, Operation, Progressing, Question, Result};

#[derive(Debug, Clone, Default)]
pub struct Redrive {
    pub selection: Selection,
    /// At most this many deliveries per second; `None`: all at once.
    pub rate: Option<f64>,
}

impl Redrive {
    fn request(&self, audit: &Audit, dry_run: bool) -> redrive::Request {
        redrive::Request {
            selection: self.selection.clone(),
            by: audit.by.clone(),
            reason: audit.reason.clone(),
            rate: self.rate,
            dry_run,
        }
    }
}

impl Operation for Redrive {
    const NAME: &'static str = "redrive";
    type Preview = Plan;
    type Outcome = Plan;
    type Progress = Progress;

    fn validate(&self, audit: &Audit) -> Result<()> {
        Ok(redrive::check(&self.request(audit, true))?)
    }

    async fn preview(&self, pool: &PgPool) -> Result<Plan> {
        Ok(redrive::redrive(pool, &self.request(&Audit::default(), true)).await?)
    }

    fn confirmation(&self, p: &Plan) -> Option<Question> {
        let n = p.selected.len();
        (n > CONFIRM_ABOVE).then(|| Question {
            question: format!("redrive {n} dead letters of consumer {}", p.consumer),
            why: format!("more than {CONFIRM_ABOVE} need a confirmation"),
            dry_run_first: true,
        })
    }

    async fn execute(&self, pool: &PgPool, audit: &Audit) -> Result<Plan> {
        Ok(redrive::redrive(pool, &self.request(audit, false)).await?)
    }

    async fn progress(&self, pool: &PgPool, plan: &Plan) -> Result<Progress> {
        Ok(redrive::progress(pool, plan).await?)
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
