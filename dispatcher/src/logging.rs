//! Logs on stderr, for the `highwater` CLI and the operator alike: one filter variable
//! (`HIGHWATER_LOG`), one format switch (`--log-format` / `HIGHWATER_LOG_FORMAT`).
use std::io::{self, Write};

/// Log format on stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines, coloured only when stderr is a terminal.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`, `span`), never coloured.
    Json,
}

/// Installs the stderr log subscriber of `highwater`: the filter comes from `HIGHWATER_LOG`, else
/// `info,sqlx=warn`. Text logs are coloured only when stderr is a terminal: a file, a pipe or a
/// container runtime's log collector gets plain text.
pub fn init_tracing(format: LogFormat) {
    init_tracing_with(format, "info,sqlx=warn");
}

/// [`init_tracing`] with another default filter (the operator's adds `kube=warn`). Does nothing
/// if a subscriber is already set.
pub fn init_tracing_with(format: LogFormat, default_filter: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("HIGHWATER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // A write error would otherwise be reported with `eprintln!`, which panics on a closed
    // stderr: in whichever task logged, the signal handler's included (issue 44).
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(|| LossyStderr).log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

/// Stderr that drops what it cannot write. A log reader that went away (`| head`, a log shipper
/// restarting, a closed pipe: EPIPE) must cost the lines, never the process or its shutdown.
pub struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // The whole line or nothing: a partial write is not retried into a closed pipe.
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// `error: ...` on stderr as a process's last words: `eprintln!` would panic (exit 101, a
/// backtrace hint in place of the message) when stderr is a closed pipe.
pub fn print_error(message: impl std::fmt::Display) {
    let _ = writeln!(io::stderr(), "error: {message}");
}
