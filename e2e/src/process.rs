//! One child process of the control plane: output to a log file, its own process group (a
//! terminal's Ctrl-C reaches the test, which stops the children in order), killed by the kernel
//! when the test process dies however it dies, stopped with SIGTERM and then SIGKILL.
use std::{
    fmt,
    fs::File,
    future::Future,
    io,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{OnceLock, mpsc},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow};
use nix::{
    errno::Errno,
    sys::signal::{Signal, kill},
    unistd::{Pid, getpid, getppid},
};

/// How long a process gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub struct Process {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

/// A start failed because a port taken from `free_port()` was bound by someone else in between;
/// [`retry_on_port_clash`] tries again with new ports.
#[derive(Debug)]
pub struct PortInUse(pub String);

impl fmt::Display for PortInUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PortInUse {}

/// Runs `start` again, up to three times in all, while it fails with [`PortInUse`].
pub async fn retry_on_port_clash<T, F, Fut>(mut start: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut attempt = 1;
    loop {
        match start().await {
            Err(e) if attempt < 3 && e.downcast_ref::<PortInUse>().is_some() => attempt += 1,
            result => return result,
        }
    }
}

impl Process {
    /// Starts `command` with stdout and stderr appended to `log` (created or truncated).
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Result<Process> {
        let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        command.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file).process_group(0);
        let parent = getpid();
        // SAFETY: the closure runs in the child between fork and exec; it only makes two system
        // calls (prctl, getppid) and builds an error from a constant, which allocates nothing.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                // The parent may have died before prctl: then nothing would ever kill us.
                if getppid() != parent {
                    return Err(io::Error::from(Errno::ESRCH));
                }
                Ok(())
            });
        }
        let child = spawn_from_long_lived_thread(command)
            .with_context(|| format!("starting {name} (log: {})", log.display()))?;
        Ok(Process { name: name.to_string(), child: Some(child), log: log.to_path_buf() })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id while it runs (for /proc figures).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The exit status once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// An error naming the process, its exit status and the end of its log if it has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.exited() {
            None => Ok(()),
            Some(status) => {
                let tail = self.log_tail(40);
                let message =
                    format!("{} exited ({status}); log: {}\n--- last lines ---\n{tail}", self.name, self.log.display());
                if tail.contains("address already in use") {
                    Err(PortInUse(message).into())
                } else {
                    Err(anyhow!(message))
                }
            }
        }
    }

    /// Polls `probe` every 100 ms until it returns true; fails if the process exits first or
    /// `timeout` passes.
    pub async fn wait_ready<F, Fut>(&mut self, what: &str, timeout: Duration, mut probe: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running().with_context(|| format!("{} while waiting for {what}", self.name))?;
            if probe().await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(anyhow!(
                    "{}: no {what} within {timeout:?}; log: {}\n--- last lines ---\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail(40)
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends SIGTERM and returns without waiting (for a pod's graceful shutdown); [`Process::stop`]
    /// or drop still waits and kills.
    pub fn terminate(&mut self) {
        if let Some(child) = &mut self.child
            && let Ok(None) = child.try_wait()
        {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        }
    }

    /// SIGKILL and wait. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then SIGKILL after a grace period; waits for the exit. Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            highwater::embedded::stop_child(&mut child, Signal::SIGTERM, STOP_GRACE);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The parent-death signal fires when the *thread* that forked the child exits, not the process.
/// Test threads and the blocking pool's threads come and go, so every child is forked by one
/// thread that lives as long as the process.
fn spawn_from_long_lived_thread(command: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("highwater-e2e-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("starting the process-spawning thread");
        tx
    });
    let (reply, result) = mpsc::channel();
    spawner.send((command, reply)).map_err(|_| io::Error::other("the process-spawning thread is gone"))?;
    result.recv().map_err(|_| io::Error::other("the process-spawning thread is gone"))?
}
