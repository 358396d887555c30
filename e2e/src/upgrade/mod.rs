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

/// The `highwater` binary of `release`, built unless cached (minutes the first time).
pub fn release_binary(release: &Release) -> Result<PathBuf> {
    let out = std::process::Command::new(dir().join("build-release.sh"))
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
