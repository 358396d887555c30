//! Logs on stderr, for the `highwater` CLI and the operator alike: one filter variable
//! (`HIGHWATER_LOG`), one format switch (`--log-format` / `HIGHWATER_LOG_FORMAT`).

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
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}
