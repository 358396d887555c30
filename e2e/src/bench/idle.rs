//! Scenario 4, idle cost: many consumers on several dispatchers and no traffic. Counted over a
//! window after start-up has settled: statements the server executed for this database
//! (`pg_stat_statements`, top-level statements, the harness's own excluded) and the dispatchers'
//! CPU time (/proc/PID/stat). `pg_stat_database` is not used: backends flush its counters lazily
//! (up to a minute late when idle), so a window would count start-up transactions.
use std::time::Duration;

use anyhow::Result;
use sqlx::{PgPool, Row};

use super::{
    BenchDb, Report, Sizes,
    db::{NOOP_SINK, consumer_yaml},
    dispatcher::{DispatcherOpts, DispatcherProc},
};

const S: &str = "4 idle";

const STATEMENTS: &str = "SELECT query, calls FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND query NOT ILIKE '%pg_stat%' AND toplevel";

async fn snapshot(pool: &PgPool) -> Result<Vec<(String, i64)>> {
    let rows = sqlx::query(STATEMENTS).fetch_all(pool).await?;
    let mut stmts = Vec::new();
    for r in rows {
        stmts.push((r.try_get::<String, _>("query")?, r.try_get::<i64, _>("calls")?));
    }
    Ok(stmts)
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let db = bench.scenario("idle").await?;
    let yaml: String = (0..sizes.idle_consumers)
        .map(|i| consumer_yaml(&format!("idle-{i}"), "idle", sizes.batch, NOOP_SINK))
        .collect();
    db.apply(&yaml).await?;
    let mut procs = Vec::new();
    for i in 0..sizes.idle_dispatchers {
        procs.push(DispatcherProc::start(&db.url, &format!("idle-{i}"), &DispatcherOpts::group("idle")).await?);
    }
    // Start-up (registration, first passes) is not idle cost.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = snapshot(&db.pool).await?;
    let cpu0: Vec<Duration> = procs.iter().map(|p| p.cpu()).collect::<Result<_>>()?;
    tokio::time::sleep(sizes.idle_window).await;
    let after = snapshot(&db.pool).await?;
    let cpu1: Vec<Duration> = procs.iter().map(|p| p.cpu()).collect::<Result<_>>()?;
    let secs = sizes.idle_window.as_secs_f64();

    let mut per_query: Vec<(String, f64)> = after
        .iter()
        .map(|(q, c)| {
            let was = before.iter().find(|(bq, _)| bq == q).map_or(0, |(_, c)| *c);
            (q.clone(), (c - was) as f64 / secs)
        })
        .filter(|(_, r)| *r > 0.0)
        .collect();
    per_query.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = per_query.iter().map(|(_, r)| r).sum();
    let n = procs.len() as f64;
    let shape = format!("{} consumers × {} dispatchers, {secs:.0} s window", sizes.idle_consumers, procs.len());
    report.add(S, "highwater", "statements/s, all dispatchers", format!("{total:.2}"), &shape);
    report.add(S, "highwater", "statements/s per dispatcher", format!("{:.2}", total / n), "goal ≤ 5");
    let cpu: f64 = cpu0.iter().zip(&cpu1).map(|(a, b)| (*b - *a).as_secs_f64()).sum::<f64>() / secs / n;
    report.add(S, "highwater", "CPU per dispatcher", format!("{:.2} % of a core", cpu * 100.0), &shape);
    for (q, r) in per_query.iter().take(4) {
        let q: String = q.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|");
        let q: String = q.chars().take(70).collect();
        report.add(S, "highwater, statement", &format!("`{q}…`"), format!("{r:.2}/s"), "");
    }
    Ok(())
}
