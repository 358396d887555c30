//! Scenario 7, memory: the dispatcher's resident set idle and under scenario 1's drain (sampled
//! every 50 ms from /proc/PID/status while the drain runs).
use anyhow::Result;

use super::{BenchDb, Peers, Report, Sizes, drain};

const S: &str = "7 memory";

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

pub fn add_rows(m: &drain::Memory, sizes: &Sizes, report: &mut Report) {
    report.add(S, "highwater", "dispatcher RSS, idle", mib(m.idle_rss), "after start, no consumer");
    report.add(S, "highwater", "dispatcher peak RSS, drain, 1 consumer", mib(m.one_consumer_peak_rss), "goal ≤ 50 MB");
    report.add(
        S,
        "highwater",
        &format!("dispatcher peak RSS, drain, {} consumers", sizes.drain_consumers),
        mib(m.many_consumers_peak_rss),
        "goal ≤ 50 MB",
    );
}

/// Runs scenario 1 without peers and reports only its memory figures.
pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let mut scratch = Report::default();
    let m = drain::run(bench, sizes, Peers::default(), &mut scratch).await?;
    add_rows(&m, sizes, report);
    Ok(())
}
