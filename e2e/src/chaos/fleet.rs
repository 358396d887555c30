//! The dispatcher processes under test: real `highwater dispatch` processes that reach the
//! database through the proxy. Killed ones are replaced under a new instance id, as a
//! Deployment would replace a pod.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Result, bail};

use crate::process::Process;

pub struct Fleet {
    bin: PathBuf,
    url: String,
    logs: PathBuf,
    procs: Vec<Process>,
    started: usize,
    /// Processes found exited without being killed by the chaos (then replaced).
    pub unexpected_exits: usize,
    /// Instances killed or found exited whose shards `consumer gc` has not collected yet.
    pub killed: Vec<String>,
}

/// The `highwater` binary: `$HIGHWATER_BIN`, else next to the running executable (`target/<profile>/`
/// for a binary, its parent for a test in `target/<profile>/deps/`).
pub fn highwater_bin() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("HIGHWATER_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().expect("an executable lives in a directory");
    for d in [Some(dir), dir.parent()].into_iter().flatten() {
        if d.join("highwater").is_file() {
            return Ok(d.join("highwater"));
        }
    }
    bail!(
        "the `highwater` binary is not next to {}\n  fix: `cargo build -p highwater --bin highwater` (add --release \
         for a release run), or set HIGHWATER_BIN",
        exe.display()
    )
}

impl Fleet {
    pub fn start(bin: PathBuf, url: String, logs: &Path, size: usize) -> Result<Fleet> {
        let mut fleet = Fleet {
            bin,
            url,
            logs: logs.to_path_buf(),
            procs: Vec::new(),
            started: 0,
            unexpected_exits: 0,
            killed: Vec::new(),
        };
        for _ in 0..size {
            fleet.spawn()?;
        }
        Ok(fleet)
    }

    fn spawn(&mut self) -> Result<()> {
        let instance = format!("chaos-{}", self.started);
        self.started += 1;
        let port = highwater::embedded::free_port()?;
        let mut cmd = Command::new(&self.bin);
        cmd.args(["dispatch", "--instance-id", &instance, "--poll-interval", "50ms", "--shutdown-grace", "5s"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("DATABASE_URL", &self.url)
            .env("HIGHWATER_LOG", "info,sqlx=warn");
        let p = Process::spawn(&instance, cmd, &self.logs.join(format!("{instance}.log")))?;
        self.procs.push(p);
        Ok(())
    }

    /// SIGKILLs a random process and starts its replacement.
    pub fn kill_one(&mut self) -> Result<String> {
        let victim = rand::random_range(0..self.procs.len());
        let mut p = self.procs.swap_remove(victim);
        p.kill();
        self.killed.push(p.name().to_owned());
        self.spawn()?;
        Ok(p.name().to_owned())
    }

    /// Replaces processes that exited on their own; returns their last log lines.
    pub fn replace_exited(&mut self) -> Result<Vec<String>> {
        let mut tails = Vec::new();
        let mut i = 0;
        while i < self.procs.len() {
            if let Some(status) = self.procs[i].exited() {
                let p = self.procs.swap_remove(i);
                tails.push(format!("{} exited ({status}):\n{}", p.name(), p.log_tail(5)));
                self.unexpected_exits += 1;
                self.killed.push(p.name().to_owned());
                self.spawn()?;
            } else {
                i += 1;
            }
        }
        Ok(tails)
    }

    /// Instance ids of the processes running now.
    pub fn running(&self) -> Vec<String> {
        self.procs.iter().map(|p| p.name().to_owned()).collect()
    }

    pub fn stop(&mut self) {
        for p in &mut self.procs {
            p.stop();
        }
    }
}
