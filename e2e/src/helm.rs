//! helm, for installing charts/highwater into a control plane: `$HIGHWATER_HELM`, else the cached
//! build of `charts/build-helm.sh` (`~/.cache/highwater-e2e/tools/helm`, built now if missing or
//! built at another version than the script pins).
use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use anyhow::{Context, Result, anyhow, bail};

/// The helm binary (found or built once per process).
pub fn helm() -> Result<PathBuf> {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    HELM.get_or_init(|| find().map_err(|e| format!("{e:#}"))).clone().map_err(|e| anyhow!(e))
}

/// The repository's `charts/highwater`.
pub fn chart_dir() -> PathBuf {
    repo_root().join("charts").join("highwater")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("e2e/ has a parent").to_path_buf()
}

fn find() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HIGHWATER_HELM") {
        return Ok(p.into());
    }
    let cache = crate::cache_dir()?;
    let bin = cache.join("tools/helm");
    let script = repo_root().join("charts/build-helm.sh");
    let text = std::fs::read_to_string(&script).with_context(|| format!("reading {}", script.display()))?;
    let pinned = text
        .lines()
        .find_map(|l| l.strip_prefix("HELM_VERSION=").map(str::to_owned))
        .context("charts/build-helm.sh sets no HELM_VERSION")?;
    // A helm placed there by hand (no stamp) is used as it is.
    let stamp = std::fs::read_to_string(cache.join("tools/helm.version")).ok();
    if bin.is_file() && stamp.is_none_or(|s| s.trim() == pinned) {
        return Ok(bin);
    }
    eprintln!("building helm {pinned} with {} (once; a few minutes)", script.display());
    let out = Command::new("bash").arg(&script).output().context("running charts/build-helm.sh")?;
    if !out.status.success() {
        bail!("charts/build-helm.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let path = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_owned();
    if !Path::new(&path).is_file() {
        bail!("charts/build-helm.sh printed no helm path: {path:?}");
    }
    Ok(PathBuf::from(path))
}

/// Runs helm with `KUBECONFIG=kubeconfig` (and its caches in a temporary HOME-independent place);
/// its stdout, or an error with its stderr.
pub async fn run<I, S>(kubeconfig: &Path, args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let helm = helm()?;
    let state = kubeconfig.parent().unwrap_or(Path::new("/tmp")).join("helm");
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = tokio::process::Command::new(&helm)
        .args(&args)
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", state.join("cache"))
        .env("HELM_CONFIG_HOME", state.join("config"))
        .env("HELM_DATA_HOME", state.join("data"))
        .output()
        .await
        .with_context(|| format!("running {}", helm.display()))?;
    if !out.status.success() {
        bail!("helm {args:?} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
