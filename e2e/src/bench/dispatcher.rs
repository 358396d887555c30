//! Dispatcher processes for the scenarios: this very binary re-executed as `bench highwater
//! dispatch ...`, which parses and runs exactly what the `highwater` binary does
//! (`highwater::cli`), so the figures are a real dispatcher's and `cargo run --bin bench` needs
//! no second build. Each process is killed when dropped.
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use nix::sys::signal::Signal;

pub struct DispatcherProc {
    pub child: Child,
    pub instance: String,
    pub http_port: u16,
}

#[derive(Clone, Debug)]
pub struct DispatcherOpts {
    pub group: String,
    pub poll_interval: Duration,
    pub idle_poll_interval: Duration,
    pub busy_poll_interval: Duration,
    /// `--lazy-cursor-interval`; `None`: the dispatcher's default.
    pub lazy_cursor_interval: Option<Duration>,
    /// `--per-consumer-pass`: every consumer its own passes (the shape before the group pass).
    pub per_consumer_pass: bool,
    /// More environment for the process (`OTEL_*` in the tracing scenario).
    pub env: Vec<(String, String)>,
}

impl DispatcherOpts {
    pub fn group(group: &str) -> Self {
        DispatcherOpts {
            group: group.into(),
            poll_interval: Duration::from_millis(100),
            idle_poll_interval: Duration::from_secs(1),
            busy_poll_interval: Duration::from_millis(5),
            lazy_cursor_interval: None,
            per_consumer_pass: false,
            env: Vec::new(),
        }
    }
}

/// The program to re-execute: `$HIGHWATER_BENCH_EXE`, else this process's own executable.
fn exe() -> Result<PathBuf> {
    match std::env::var_os("HIGHWATER_BENCH_EXE") {
        Some(p) => Ok(p.into()),
        None => std::env::current_exe().context("finding the bench executable"),
    }
}

impl DispatcherProc {
    /// Starts one dispatcher and waits for `/readyz`.
    pub async fn start(url: &str, instance: &str, opts: &DispatcherOpts) -> Result<Self> {
        let http_port = highwater::embedded::free_port()?;
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let child = Command::new(exe()?)
            .args(["highwater", "dispatch", "--group", &opts.group, "--instance-id", instance])
            .args(["--poll-interval", &ms(opts.poll_interval), "--idle-poll-interval", &ms(opts.idle_poll_interval)])
            .args(["--busy-poll-interval", &ms(opts.busy_poll_interval)])
            .args(opts.lazy_cursor_interval.iter().flat_map(|d| ["--lazy-cursor-interval".to_owned(), ms(*d)]))
            .args(opts.per_consumer_pass.then_some("--per-consumer-pass"))
            .args(["--listen", &format!("127.0.0.1:{http_port}"), "--shutdown-grace", "2s"])
            .env("DATABASE_URL", url)
            .env("HIGHWATER_LOG", "warn,sqlx=error")
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a dispatcher process")?;
        let mut d = DispatcherProc { child, instance: instance.into(), http_port };
        d.wait_ready().await?;
        Ok(d)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let url = format!("http://127.0.0.1:{}/readyz", self.http_port);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("dispatcher {} exited while starting ({status})", self.instance);
            }
            if reqwest::get(&url).await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("dispatcher {} was not ready within 60 s", self.instance);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size in bytes (VmRSS).
    pub fn rss(&self) -> Result<u64> {
        rss(self.pid())
    }

    /// User plus system CPU time used so far.
    pub fn cpu(&self) -> Result<Duration> {
        cpu(self.pid())
    }

    /// CPU time of the process's live threads in nanoseconds (`/proc/PID/task/*/schedstat`):
    /// precise where [`Self::cpu`] counts 10 ms ticks, which a tiny drain of the group pass can
    /// stay under. A thread that exits takes its time with it, so subtract with `saturating_sub`.
    pub fn cpu_ns(&self) -> Result<Duration> {
        let mut ns = 0u64;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid()))? {
            // A thread may end between the listing and the read.
            let Ok(s) = std::fs::read_to_string(task?.path().join("schedstat")) else { continue };
            ns += s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
        Ok(Duration::from_nanos(ns))
    }

    /// The sum of a counter's series on its `/metrics` (0 when it has none).
    pub async fn counter(&self, name: &str) -> Result<f64> {
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.http_port)).await?.text().await?;
        let prefix = format!("{name}{{");
        Ok(text
            .lines()
            .filter(|l| l.starts_with(&prefix) || l.split(' ').next() == Some(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// Events this process delivered, from its `/metrics`, per consumer.
    pub async fn processed(&self) -> Result<Vec<(String, f64)>> {
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.http_port)).await?.text().await?;
        let mut out = Vec::new();
        for line in text.lines().filter(|l| l.starts_with("highwater_events_processed_total{")) {
            let consumer = line.split("consumer=\"").nth(1).and_then(|s| s.split('"').next()).unwrap_or("");
            let v: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            out.push((consumer.to_owned(), v));
        }
        Ok(out)
    }
}

impl Drop for DispatcherProc {
    fn drop(&mut self) {
        highwater::embedded::stop_child(&mut self.child, Signal::SIGTERM, Duration::from_secs(3));
    }
}

/// Resident set size of process `pid` in bytes (VmRSS).
pub fn rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmRSS missing from /proc/PID/status")?;
    Ok(kb * 1024)
}

/// User plus system CPU time process `pid` used so far (all its threads).
pub fn cpu(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at state, field 3.
    let rest = stat.rsplit_once(')').context("malformed /proc/PID/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

pub(crate) fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100)
    })
}

/// Samples the highest RSS of `procs` every 50 ms until `stop` resolves.
pub async fn peak_rss<F: std::future::Future>(procs: &[&DispatcherProc], stop: F) -> (u64, F::Output) {
    let mut peak = 0;
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            out = &mut stop => return (peak, out),
            _ = tick.tick() => {
                for p in procs {
                    peak = peak.max(p.rss().unwrap_or(0));
                }
            }
        }
    }
}
