//! `highwater migrate`.
use std::time::Duration;

use clap::Args;

use crate::{Result, db, migrate};

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The longest one lock request of the migration waits before it gives way to running
    /// transactions and retries: also the longest an application write queues behind it. Keep it
    /// below PostgreSQL's deadlock_timeout (1s by default).
    #[arg(long, env = "HIGHWATER_MIGRATE_LOCK_TIMEOUT", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub lock_timeout: Duration,
    /// Gives up (exit 1, nothing changed) when the locks could not be had for this long.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub give_up_after: Duration,
    /// Applies a breaking step although dispatchers older than it are alive (they exit when they
    /// see the schema).
    #[arg(long)]
    pub force: bool,
}

pub async fn run(url: &str, a: &MigrateArgs) -> Result<()> {
    let pool = db::connect(url, 2).await?;
    let opts = migrate::Options { lock_timeout: a.lock_timeout, give_up_after: a.give_up_after, force: a.force };
    let r = migrate::run(&pool, &opts).await?;
    let target = db::describe_target(url);
    if r.applied.is_empty() && !r.definitions_applied && r.rewritten.is_empty() {
        println!(
            "schema at {target} is up to date (release {}, schema version {})",
            migrate::window::RELEASE,
            migrate::window::SCHEMA_VERSION
        );
        return Ok(());
    }
    for v in &r.rewritten {
        println!("migration {v}: recorded text was a released one since rewritten; checksum recorded anew");
    }
    println!(
        "migrated {target} to release {} (schema version {}): {} migration(s) {:?}, definitions {}, in {:.1?} \
         after {} retr{}",
        migrate::window::RELEASE,
        migrate::window::SCHEMA_VERSION,
        r.applied.len(),
        r.applied,
        if r.definitions_applied { "applied" } else { "unchanged" },
        r.duration,
        r.retries,
        if r.retries == 1 { "y" } else { "ies" }
    );
    Ok(())
}
