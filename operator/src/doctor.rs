//! `highwater doctor` run by the operator: its findings become every EventConsumer's
//! `DatabaseHealthy` condition, so `kubectl get ec -o yaml` (or `kubectl wait`) shows what
//! stands between the database and a working highwater, with its fix, without a shell into a pod.
use std::{sync::RwLock, time::Duration};

use highwater::doctor::{self, Finding, Level, Role};
use tokio_util::sync::CancellationToken;

/// The latest findings that are not `ok`, and how bad the worst is.
#[derive(Debug, Clone)]
pub struct Summary {
    pub level: Level,
    pub findings: Vec<Finding>,
}

impl Summary {
    pub fn of(findings: Vec<Finding>) -> Summary {
        let level = findings.iter().map(|f| f.level).max().unwrap_or(Level::Ok);
        Summary { level, findings: findings.into_iter().filter(|f| f.level != Level::Ok).collect() }
    }

    /// `check: problem (fix: …)`, the errors first, joined; what the condition's message says.
    pub fn message(&self) -> String {
        if self.findings.is_empty() {
            return "highwater doctor found nothing to fix".into();
        }
        let mut sorted: Vec<&Finding> = self.findings.iter().collect();
        sorted.sort_by_key(|f| std::cmp::Reverse(f.level));
        let text = sorted
            .iter()
            .map(|f| match &f.fix {
                Some(fix) => format!("{}: {} (fix: {fix})", f.check, f.message),
                None => format!("{}: {}", f.check, f.message),
            })
            .collect::<Vec<_>>()
            .join("; ");
        // A condition's message is for a person; the whole list is `highwater doctor`'s.
        if text.chars().count() > 1000 { format!("{}…", text.chars().take(1000).collect::<String>()) } else { text }
    }
}

/// What the status of each resource reads; `None` until the first run finished.
#[derive(Default)]
pub struct Health(RwLock<Option<Summary>>);

impl Health {
    pub fn latest(&self) -> Option<Summary> {
        self.0.read().map(|g| g.clone()).unwrap_or_default()
    }

    fn set(&self, s: Summary) {
        if let Ok(mut g) = self.0.write() {
            *g = Some(s);
        }
    }
}

/// Runs the checks every `interval` (as the operator's role: its privileges are the ones that
/// matter here), logging when the worst level changes, until `stop`.
pub async fn run(
    url: String,
    health: std::sync::Arc<Health>,
    interval: Duration,
    long_tx: Duration,
    stop: CancellationToken,
) {
    let mut last: Option<Level> = None;
    loop {
        let summary = Summary::of(doctor::run(&url, Role::Operator, long_tx).await);
        if last != Some(summary.level) {
            match summary.level {
                Level::Ok => tracing::info!("highwater doctor: the database is healthy"),
                _ => tracing::warn!(level = ?summary.level, findings = %summary.message(), "highwater doctor"),
            }
            last = Some(summary.level);
        }
        health.set(summary);
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_puts_errors_first_and_names_each_fix() {
        let s = Summary::of(vec![
            Finding::ok("server", "PostgreSQL 15"),
            Finding::warning("fence", "pid 7 holds the fence back for 90s", "end that transaction"),
            Finding::error("privileges", "no SELECT on highwater.events", "run highwater roles --print"),
        ]);
        assert_eq!(s.level, Level::Error);
        assert_eq!(s.findings.len(), 2, "ok findings are left out");
        assert_eq!(
            s.message(),
            "privileges: no SELECT on highwater.events (fix: run highwater roles --print); fence: pid 7 holds the \
             fence back for 90s (fix: end that transaction)"
        );
        assert_eq!(Summary::of(vec![Finding::ok("server", "x")]).level, Level::Ok);
    }
}
