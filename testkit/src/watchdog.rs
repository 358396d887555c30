//! Stops a cluster when this process ends, however it ends. A cluster in a `static` is never
//! dropped, and a SIGKILLed test runs no destructor: without this its postmaster (in a process
//! group of its own) would outlive the test binary, and its data directory would stay in /tmp.
//!
//! The watchdog is a `sh` in a process group of its own (a Ctrl-C aimed at the tests does not
//! stop it before it has done its work) that blocks reading a pipe whose only writer is this
//! process. The kernel closes the writer when the process exits or is killed; the read returns;
//! the watchdog shuts the postmaster down (SIGQUIT: immediate shutdown, which also stops its
//! backends and releases its shared memory), waits for it to exit, and removes the directory.
//! The pipe is opened close-on-exec, so the processes the tests start do not hold it open.
use std::{
    os::unix::process::CommandExt,
    process::{Child, ChildStdin, Command, Stdio},
};

use highwater::{Error, Result, embedded::EmbeddedPostgres};

/// `$1` the postmaster's pid, `$2` the directory to remove. It signals `$1` only while that pid
/// is a postgres (not a process that reused the pid), and waits at most 15 s for it to exit (a
/// zombie has exited: its new parent may be slow to reap it).
const SCRIPT: &str = r#"
read -r _
if grep -q postgres "/proc/$1/cmdline" 2>/dev/null; then kill -QUIT "$1" 2>/dev/null; fi
i=0
while [ "$i" -lt 300 ]; do
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)
    if [ -z "$state" ] || [ "$state" = Z ]; then break; fi
    sleep 0.05
    i=$((i + 1))
done
rm -rf "$2"
"#;

/// A running watchdog of one cluster. Dropping it fires it, as the process ending does.
pub struct Watchdog {
    _pipe: ChildStdin,
    _child: Child,
}

impl Watchdog {
    /// Starts the watchdog of `pg`, which must be running.
    pub fn arm(pg: &EmbeddedPostgres) -> Result<Self> {
        let pid = pg.pid().ok_or_else(|| Error::Embedded("the watchdog needs a running server".into()))?;
        let mut child = Command::new("sh")
            .args(["-c", SCRIPT, "highwater-testkit-watchdog", &pid.to_string()])
            .arg(pg.root())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(Error::io("starting the cluster's watchdog (sh)"))?;
        let pipe = child.stdin.take().expect("piped stdin");
        Ok(Watchdog { _pipe: pipe, _child: child })
    }
}
