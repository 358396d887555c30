//! `highwater consumer top`: every shard's status, lag and delivery rate, refreshed in place.
use std::{collections::HashMap, io::IsTerminal, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use highwater_store::{
    Result,
    ops::{ShardStatus, status},
};

pub struct TopOptions {
    pub interval: Duration,
    /// Stop after this many screens (for scripts and tests); `None`: until Ctrl-C.
    pub iterations: Option<u64>,
}

pub async fn run(pool: &PgPool, opts: TopOptions, stop: CancellationToken) -> Result<()> {
    let tty = std::io::stdout().is_terminal();
    let mut previous: HashMap<(String, String), i64> = HashMap::new();
    let mut screens = 0u64;
    loop {
        let rows = status(pool, None).await?;
        let screen = render(&rows, &previous, opts.interval);
        // Clear and home on a terminal; plain successive tables when piped.
        print!("{}{screen}", if tty { "\x1b[2J\x1b[H" } else { "" });
        previous = rows.iter().map(|r| ((r.consumer.clone(), r.instance_id.clone()), r.delivered_count)).collect();
        screens += 1;
        if opts.iterations.is_some_and(|n| screens >= n) {
            return Ok(());
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(opts.interval) => {}
        }
    }
}

/// One screen. The rate is delivered events per second since the previous screen.
pub fn render(rows: &[ShardStatus], previous: &HashMap<(String, String), i64>, interval: Duration) -> String {
    let now = chrono::Utc::now().format("%H:%M:%S");
    let mut out = format!("highwater top — {now} — {} shards (Ctrl-C to quit)\n\n", rows.len());
    use crate::render::table::{Align::*, render};
    let columns = [
        ("CONSUMER", Left),
        ("INSTANCE", Left),
        ("DELIVERY", Left),
        ("STATUS", Left),
        ("LAG", Right),
        ("LAG(s)", Right),
        ("RATE/s", Right),
        ("ATTEMPTS", Right),
        ("LAST ERROR", Left),
    ];
    out.push_str(&render(
        0,
        &columns,
        rows.iter().map(|r| {
            let rate = previous
                .get(&(r.consumer.clone(), r.instance_id.clone()))
                .map(|p| format!("{:.1}", (r.delivered_count - p).max(0) as f64 / interval.as_secs_f64()))
                .unwrap_or_else(|| "-".into());
            vec![
                r.consumer.clone(),
                r.instance_id.clone(),
                r.delivery.to_string(),
                r.status.to_string(),
                r.lag_events.to_string(),
                r.lag_seconds.map(|s| format!("{s:.1}")).unwrap_or_else(|| "-".into()),
                rate,
                r.attempts.to_string(),
                r.last_error.as_deref().unwrap_or("").chars().take(50).collect(),
            ]
        }),
    ));
    out
}
