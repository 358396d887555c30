//! Real message brokers for the broker sinks' tests, on loopback with free ports: Apache Kafka
//! ([`kafka`], one KRaft process from Maven Central jars) and NATS with JetStream ([`nats`],
//! `nats-server` built from its Go module). Both are cached under [`crate::cache_dir`] and can be
//! killed and restarted on the same ports and data, and put behind [`crate::proxy`].
pub mod kafka;
pub mod nats;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, anyhow, bail};

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

/// The runtime jars of the Maven project `pom_src` (a pom that names dependencies and builds
/// nothing), resolved with `mvn dependency:copy-dependencies` into `<e2e cache>/<name>/libs` on
/// first use. The cache entry is the pom's copy next to the jars: a changed pom resolves again.
pub async fn maven_jars(pom_src: &Path, name: &str) -> Result<PathBuf> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = LOCK.lock().await;
    let pom = std::fs::read_to_string(pom_src).with_context(|| format!("reading {}", pom_src.display()))?;
    let dir = crate::cache_dir()?.join(name);
    let libs = dir.join("libs");
    if std::fs::read_to_string(dir.join("pom.xml")).is_ok_and(|p| p == pom) && libs.is_dir() {
        return Ok(libs);
    }
    // Resolve into a fresh directory and rename it into place: another test binary resolving at
    // the same time never sees half a set of jars.
    std::fs::create_dir_all(&dir)?;
    let staging = tempfile::Builder::new().prefix("libs-").tempdir_in(&dir)?;
    let mut mvn = Command::new("mvn");
    mvn.args(["-q", "-B", "-f"])
        .arg(pom_src)
        .arg("dependency:copy-dependencies")
        .arg(format!("-DoutputDirectory={}", staging.path().display()))
        .arg("-DincludeScope=runtime");
    let out = tokio::task::spawn_blocking(move || mvn.output())
        .await?
        .with_context(|| format!("running mvn to fetch the jars of {name} (install Maven: apt-get install maven)"))?;
    if !out.status.success() {
        bail!(
            "mvn dependency:copy-dependencies -f {} failed:\n{}",
            pom_src.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let _ = std::fs::remove_dir_all(&libs);
    std::fs::rename(staging.keep(), &libs)?;
    std::fs::write(dir.join("pom.xml"), pom)?;
    Ok(libs)
}
