//! Real message brokers for the broker sinks' tests, on loopback with free ports: Apache Kafka
//! ([`kafka`], one KRaft process from Maven Central jars) and NATS with JetStream ([`nats`],
//! `nats-server` built from its Go module). Both are cached under [`crate::cache_dir`] and can be
//! killed and restarted on the same ports and data, and put behind [`crate::proxy`].
pub mod kafka;
pub mod nats;

use std::path::Path;

use anyhow::{Result, anyhow};

/// Waits until `log` has a line containing `needle`, while `process` runs.
async fn wait_for_line(
    process: &mut crate::process::Process,
    log: &Path,
    needle: &str,
    timeout: std::time::Duration,
) -> Result<()> {
    let log = log.to_path_buf();
    let needle = needle.to_owned();
    process
        .wait_ready(&format!("the log line {needle:?}"), timeout, || {
            let found = std::fs::read_to_string(&log).is_ok_and(|t| t.contains(&needle));
            async move { found }
        })
        .await
        .map_err(|e| anyhow!("{e:#}"))
}
