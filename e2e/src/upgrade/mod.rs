//! Upgrades under load: the earlier releases' binaries (built from this repository's history by
//! `e2e/upgrade/build-release.sh`, cached) and application writers that record every failure and
//! how long each `highwater.append` waited.
pub mod writers;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// A release of the compatibility window, as `e2e/upgrade/releases` names it.
#[derive(Debug, Clone)]
pub struct Release {
    pub name: String,
    pub commit: String,
    pub schema_version: i32,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("upgrade")
}

/// The releases of the window, oldest first.
pub fn releases() -> Result<Vec<Release>> {
    let text = std::fs::read_to_string(dir().join("releases")).context("reading e2e/upgrade/releases")?;
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [name, commit, v] => {
                    Ok(Release { name: name.into(), commit: commit.into(), schema_version: v.parse()? })
                }
                _ => bail!("e2e/upgrade/releases: expected `name commit schema_version`, got {l:?}"),
            }
        })
        .collect()
}

/// The release to measure: the one `HIGHWATER_UPGRADE_FROM` names, else `default` of the window.
pub fn release_from_env(default: impl FnOnce(Vec<Release>) -> Option<Release>) -> Result<Release> {
    let releases = releases()?;
    match std::env::var("HIGHWATER_UPGRADE_FROM") {
        Ok(name) => releases
            .into_iter()
            .find(|r| r.name == name)
            .with_context(|| format!("HIGHWATER_UPGRADE_FROM={name} is not a release of e2e/upgrade/releases")),
        Err(_) => default(releases).context("e2e/upgrade/releases names no release"),
    }
}

/// The `highwater` binary of `release`, built unless cached (minutes the first time).
pub fn release_binary(release: &Release) -> Result<PathBuf> {
    build(release, false)
}

/// The directory holding `highwater` and `highwater-operator` of `release` (what its image
/// holds), built unless cached.
pub fn release_programs(release: &Release) -> Result<PathBuf> {
    let highwater = build(release, true)?;
    Ok(highwater.parent().context("the binary's directory")?.to_path_buf())
}

/// `release`'s chart (charts/highwater at its commit), written under `into`; returns its path.
pub fn release_chart(release: &Release, into: &Path) -> Result<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tarball = into.join("chart.tar");
    let archive = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["archive", "--format=tar", "-o"])
        .arg(&tarball)
        .args([&release.commit, "charts/highwater"])
        .output()
        .context("running git archive")?;
    if !archive.status.success() {
        bail!(
            "git archive of {}'s chart: {}; fix: clone without --depth",
            release.commit,
            String::from_utf8_lossy(&archive.stderr).trim()
        );
    }
    let unpacked = std::process::Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(into)
        .status()
        .context("running tar")?;
    if !unpacked.success() {
        bail!("tar -xf {} failed", tarball.display());
    }
    Ok(into.join("charts/highwater"))
}

fn build(release: &Release, operator: bool) -> Result<PathBuf> {
    let mut command = std::process::Command::new(dir().join("build-release.sh"));
    if operator {
        command.arg("--operator");
    }
    let out = command
        .arg(&release.commit)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running e2e/upgrade/build-release.sh")?;
    if !out.status.success() {
        bail!("building release {} ({}) failed: see the lines above", release.name, release.commit);
    }
    let path = PathBuf::from(String::from_utf8(out.stdout)?.trim());
    if !path.is_file() {
        bail!("build-release.sh printed {}, which is not a file", path.display());
    }
    Ok(path)
}
