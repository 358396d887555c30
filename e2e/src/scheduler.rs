//! kube-scheduler, as its own identity (`system:kube-scheduler`, which the bootstrap RBAC policy
//! binds). No leader election, no serving port.
use std::{path::Path, process::Command};

use anyhow::Result;

use crate::process::Process;

/// The user its client certificate names.
pub const USER: &str = "system:kube-scheduler";

pub struct Scheduler {
    process: Process,
}

impl Scheduler {
    pub fn start(program: &Path, kubeconfig: &Path, log: &Path) -> Result<Scheduler> {
        let mut command = Command::new(program);
        command.args([
            format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--profiling=false".into(),
        ]);
        Ok(Scheduler { process: Process::spawn("kube-scheduler", command, log)? })
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}
