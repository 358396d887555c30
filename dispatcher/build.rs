// `--version` prints the git revision too: `HIGHWATER_VERSION` is "<crate version> (<revision>)".
// (The migrations are embedded by the store crate, whose build.rs watches them.)
use std::process::Command;

fn main() {
    let revision = revision();
    println!("cargo:rustc-env=HIGHWATER_GIT_REVISION={revision}");
    println!("cargo:rustc-env=HIGHWATER_VERSION={} ({revision})", env!("CARGO_PKG_VERSION"));
}

// `$HIGHWATER_GIT_REVISION` when set (the Dockerfile's build stage has no .git), else
// `git rev-parse --short HEAD`, else "unknown". Reruns when HEAD or the branch it names moves.
fn revision() -> String {
    println!("cargo:rerun-if-env-changed=HIGHWATER_GIT_REVISION");
    if let Ok(r) = std::env::var("HIGHWATER_GIT_REVISION")
        && !r.trim().is_empty()
    {
        return r.trim().to_string();
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !s.is_empty()).then_some(s)
    };
    let Some(revision) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".to_string();
    };
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    revision
}
