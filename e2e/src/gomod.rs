//! Files of published Go modules (CRD manifests of the Prometheus Operator and KEDA), fetched
//! through the Go module proxy into the e2e cache with the machine's Go.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The directory of `module` (`path@version`) in the e2e Go module cache, downloaded once.
pub async fn module_dir(module: &str) -> Result<PathBuf> {
    let cache = crate::cache_dir()?;
    let out = tokio::process::Command::new(go(&cache))
        .args(["mod", "download", "-json", module])
        .env("GOMODCACHE", cache.join("go/mod"))
        .env("GOFLAGS", "-mod=mod")
        .current_dir(std::env::temp_dir())
        .output()
        .await
        .with_context(|| format!("running go to fetch {module} (install Go or put it on PATH)"))?;
    if !out.status.success() {
        bail!("go mod download {module}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: Value = serde_json::from_slice(&out.stdout)?;
    let dir = v["Dir"].as_str().with_context(|| format!("go mod download printed no Dir: {v}"))?;
    Ok(PathBuf::from(dir))
}

/// Go: the one on PATH, else the toolchain `e2e/control-plane/build.sh` fetched into the cache,
/// else the usual install directory.
fn go(cache: &Path) -> PathBuf {
    let on_path =
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("go")).find(|p| p.is_file()));
    let cached = || {
        let dir = cache.join("go/toolchain/golang.org");
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path().join("bin/go")))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        found.pop()
    };
    on_path.or_else(cached).unwrap_or_else(|| PathBuf::from("/usr/local/go/bin/go"))
}

/// Builds the command of `package@version` with `go install` (sources from the Go module proxy)
/// into the e2e cache once, and returns the binary's path.
pub async fn install(package: &str, version: &str) -> Result<PathBuf> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = LOCK.lock().await;
    let cache = crate::cache_dir()?;
    let name = package.trim_end_matches("/v2").rsplit('/').next().unwrap_or(package);
    let bin_dir = cache.join(format!("{name}-{version}"));
    let bin = bin_dir.join(name);
    if bin.is_file() {
        return Ok(bin);
    }
    let out = tokio::process::Command::new(go(&cache))
        .args(["install", &format!("{package}@{version}")])
        .env("GOMODCACHE", cache.join("go/mod"))
        .env("GOBIN", &bin_dir)
        .env("GOFLAGS", "-mod=mod")
        .current_dir(std::env::temp_dir())
        .output()
        .await
        .with_context(|| format!("running go to build {package}@{version} (install Go or put it on PATH)"))?;
    if !out.status.success() || !bin.is_file() {
        bail!("go install {package}@{version}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(bin)
}
