//! The Go peers (e2e/bench/peers): built once per recipe by `e2e/bench/peers/build.sh` into the
//! e2e cache, run as processes that print one JSON line.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
};

use anyhow::{Context, Result, anyhow, bail};

pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/peers/build.sh")
}

/// The directory holding `watermill-peer` and `river-peer`; builds them on first use.
pub fn dir() -> Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = build_script();
        let out = Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!("{} failed ({}); see its messages above", script.display(), out.status));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        Ok(PathBuf::from(stdout.lines().last().unwrap_or("").trim()))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// What a peer prints.
#[derive(Debug, Clone, Copy)]
pub struct PeerRun {
    pub publish_per_s: f64,
    pub drain_per_s: f64,
}

pub async fn run(binary: &str, args: Vec<String>) -> Result<PeerRun> {
    let path = dir()?.join(binary);
    let out = tokio::process::Command::new(&path)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", path.display()))?;
    if !out.status.success() {
        bail!("{binary} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{binary} printed no JSON: {}", String::from_utf8_lossy(&out.stdout)))?;
    let f = |k: &str| v[k].as_f64().with_context(|| format!("{binary} printed no {k}"));
    Ok(PeerRun { publish_per_s: f("publish_per_s")?, drain_per_s: f("drain_per_s")? })
}
