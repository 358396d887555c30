//! PostgreSQL's own CPU time: the postmaster, every backend alive, and every backend that exited
//! (the kernel adds a reaped child's time to its parent's `cutime`/`cstime`). What a scenario
//! costs the database, whichever connection did the work.
use std::time::Duration;

use anyhow::{Context, Result};
use sqlx::PgPool;

/// The cluster's CPU time so far (user + system), found from any connection of `pool`.
pub async fn server_cpu(pool: &PgPool) -> Result<Duration> {
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(pool).await?;
    let postmaster = stat(backend as u32)?.ppid;
    let parent = stat(postmaster)?;
    let mut ticks = parent.own + parent.children;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // A process may exit between the listing and the read: skip it (its time moved to
        // the postmaster's children's).
        if let Ok(s) = stat(pid)
            && s.ppid == postmaster
        {
            ticks += s.own;
        }
    }
    Ok(Duration::from_secs_f64(ticks as f64 / super::dispatcher::clock_ticks() as f64))
}

struct Stat {
    ppid: u32,
    /// utime + stime, in clock ticks.
    own: u64,
    /// cutime + cstime: the reaped children's.
    children: u64,
}

fn stat(pid: u32) -> Result<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at state, field 3.
    let rest = text.rsplit_once(')').context("malformed /proc/PID/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| -> Result<u64> { Ok(f.get(i).context("short /proc/PID/stat")?.parse()?) };
    Ok(Stat { ppid: n(1)? as u32, own: n(11)? + n(12)?, children: n(13)? + n(14)? })
}
