//! The `highwater` command line. `main.rs` only parses and calls [`run`].
use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

mod console;
mod consumer;
mod discard;
mod doctor;
mod event_types_cli;
mod events;
mod floors;
mod migrate;
mod operation;
mod redrive;
mod replay;
mod roles;
mod top;

pub use consumer::{ConsumerCmd, REDRIVE_CONFIRM_ABOVE};
pub use events::EventsCmd;

pub use crate::logging::{LogFormat, init_tracing};

use crate::{Error, Result, db, definitions, dispatch, instance, quickstart, shutdown::shutdown_signal};
pub use event_types_cli::EventTypesCmd;

#[derive(Parser, Debug)]
#[command(name = "highwater", version = crate::VERSION, about = "Gap-free post-commit event delivery from PostgreSQL")]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE).
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Log format on stderr: `text` (coloured only on a terminal) or `json` (one object per line).
    #[arg(long, env = "HIGHWATER_LOG_FORMAT", value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Apply the schema migrations and the current function definitions, in one transaction
    /// that waits behind running writers (idempotent).
    Migrate(migrate::MigrateArgs),
    /// Run the delivery loop for the consumers of one group.
    Dispatch(DispatchArgs),
    /// Manage consumers.
    #[command(subcommand)]
    Consumer(ConsumerCmd),
    /// Append events.
    #[command(subcommand)]
    Events(EventsCmd),
    /// Register and list event types.
    #[command(subcommand, name = "event-types")]
    EventTypes(EventTypesCmd),
    /// Check the database for highwater: server version, schema window, the role's privileges,
    /// LISTEN, what holds the fence back; each finding with its fix. Exit 0 ok, 1 warnings, 2
    /// errors.
    Doctor(doctor::DoctorArgs),
    /// Start an embedded PostgreSQL (unless DATABASE_URL is set), apply the examples, run several
    /// dispatchers, append sample events and show delivery and lag live.
    Quickstart(quickstart::QuickstartArgs),
    /// Serve the web console: lag and the fence, dead letters, redrive and discard from a browser
    /// (docs/console.md).
    Console(console::ConsoleArgs),
    /// Print the SQL of least-privilege database roles (owner, dispatcher, operator, applications,
    /// SQL sink roles).
    Roles(roles::RolesArgs),
}

#[derive(Args, Debug)]
pub struct DispatchArgs {
    /// Dispatcher group: only consumers with this `group` run here.
    #[arg(long, env = "HIGHWATER_GROUP", default_value = "default")]
    pub group: String,
    /// Instance id (defaults to HIGHWATER_INSTANCE_ID, then a random UUID).
    #[arg(long, env = "HIGHWATER_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Apply the EventConsumer definitions of this file or directory before starting.
    #[arg(long)]
    pub consumers: Option<PathBuf>,
    /// Polling interval while LISTEN is down or events wait above the fence (10ms at least).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,
    /// Safety-net polling interval while LISTEN works (10ms at least).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub idle_poll_interval: Duration,
    /// Polling interval while events keep coming; writers skip their NOTIFY meanwhile (1ms at
    /// least).
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    pub busy_poll_interval: Duration,
    /// How long a consumer's cursor may stay behind the head while the new events are all of
    /// types it does not select (no pass per head move for it; its lag and read-your-writes
    /// bounds stay exact); 0 moves it on every head move.
    #[arg(long, env = "HIGHWATER_LAZY_CURSOR_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub lazy_cursor_interval: Duration,
    /// Every consumer runs its own passes instead of the group pass (docs/delivery.md, "The group
    /// pass"): for comparing the two in the benchmark, and for the tests of the per-shard pass's
    /// own mechanisms.
    #[arg(long, hide = true, env = "HIGHWATER_PER_CONSUMER_PASS")]
    pub per_consumer_pass: bool,
    /// How often this dispatcher refreshes its liveness row while its group has a partitioned
    /// consumer (10× less often otherwise); the group shares the partitions among live
    /// dispatchers, and one silent for 5 intervals is gone (100ms at least).
    #[arg(long, env = "HIGHWATER_MEMBERSHIP_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub membership_interval: Duration,
    /// How long SIGTERM waits for passes in flight.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Database connections (each shard being delivered holds one).
    #[arg(long, default_value_t = 16)]
    pub max_connections: u32,
    /// How long to keep retrying an unreachable database at start.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// Address of the HTTP server (/metrics, /healthz, /readyz, SSE streams); `off` for none.
    #[arg(long, env = "HIGHWATER_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: String,
    /// How often lag, status and fence age are refreshed for /metrics (100ms at least).
    #[arg(long, env = "HIGHWATER_METRICS_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub metrics_interval: Duration,
    /// File of bearer tokens (one per line) that SSE clients may present. Tokens may also come
    /// from HIGHWATER_SSE_TOKENS (comma-separated), kept out of the command line.
    #[arg(long, env = "HIGHWATER_SSE_TOKENS_FILE")]
    pub sse_tokens_file: Option<PathBuf>,
    /// File of bearer tokens (one per line) that `POST /v1/consumers/{name}/redrive` requires
    /// (none configured: that endpoint answers 401). Also from HIGHWATER_OPS_TOKENS
    /// (comma-separated). Keep them apart from the SSE tokens: they redeliver events.
    #[arg(long, env = "HIGHWATER_OPS_TOKENS_FILE")]
    pub ops_tokens_file: Option<PathBuf>,
    /// Hosts webhook sinks may reach: a name (hooks.example.com), a wildcard (*.example.com), an
    /// address or a network (10.0.0.0/8); repeat or separate with commas. Unset: any host.
    #[arg(long = "webhook-allow", env = "HIGHWATER_WEBHOOK_ALLOW", value_delimiter = ',')]
    pub webhook_allow: Vec<String>,
    /// Refuse webhook targets on private, loopback and link-local addresses (cloud metadata
    /// included) unless --webhook-allow names them.
    #[arg(long, env = "HIGHWATER_WEBHOOK_BLOCK_PRIVATE")]
    pub webhook_block_private: bool,
}

fn require_url(g: &Global) -> Result<String> {
    g.database_url.clone().ok_or_else(|| {
        Error::config("no database given")
            .with_fix("set DATABASE_URL or pass --database-url (or run `highwater quickstart`, which starts its own)")
    })
}

/// A JSON argument: the text itself, or `@FILE`. A parse error names the argument (and the file)
/// and prints a fix line.
pub(crate) fn json_arg(text: &str, what: &str) -> Result<serde_json::Value> {
    let (body, file) = match text.strip_prefix('@') {
        Some(path) => {
            (std::fs::read_to_string(path).map_err(Error::io(format!("reading {what} file {path}")))?, Some(path))
        }
        None => (text.to_owned(), None),
    };
    serde_json::from_str(&body).map_err(|e| {
        let (source, fix) = match file {
            Some(path) => (
                format!(" (file {path})"),
                format!("correct the JSON in {path}; the line and column above are in that file"),
            ),
            None => {
                let example = match what {
                    "--payload" => r#"{"order_id": "42", "total": 99.5}"#,
                    "--metadata" => r#"{"user": "ops"}"#,
                    _ => "{}",
                };
                (
                    String::new(),
                    format!(
                        "pass JSON text in single quotes, so the shell keeps its double quotes, e.g. \
                         {what} '{example}'; or {what} @FILE to read it from a file"
                    ),
                )
            }
        };
        Error::config(format!("{what} is not valid JSON{source}: {e}")).with_fix(fix)
    })
}

pub async fn run(cli: Cli) -> Result<()> {
    let g = cli.global;
    match cli.command {
        Command::Migrate(a) => migrate::run(&require_url(&g)?, &a).await?,
        Command::Dispatch(a) => {
            let url = require_url(&g)?;
            let instance_id = instance::resolve(a.instance_id.as_deref())?;
            floors::check(&floors::Intervals {
                poll: a.poll_interval,
                idle: a.idle_poll_interval,
                busy: a.busy_poll_interval,
                metrics: a.metrics_interval,
                membership: a.membership_interval,
            })?;
            let shutdown = shutdown_signal();
            // Files are read before anything else: a bad one fails fast.
            let consumers = a.consumers.as_deref().map(definitions::load).transpose()?.unwrap_or_default();
            let pool = db::lazy_pool(&url, a.max_connections)?;
            let mut cfg = dispatch::DispatchConfig::new(&a.group, &instance_id);
            cfg.startup =
                dispatch::Startup { database_url: url.clone(), connect_timeout: a.connect_timeout, consumers };
            cfg.poll_interval = a.poll_interval;
            cfg.idle_poll_interval = a.idle_poll_interval;
            cfg.busy_poll_interval = a.busy_poll_interval;
            cfg.lazy_cursor_interval = a.lazy_cursor_interval;
            cfg.group_pass = !a.per_consumer_pass;
            cfg.shutdown_grace = a.shutdown_grace;
            cfg.membership_interval = a.membership_interval;
            cfg.metrics_interval = a.metrics_interval;
            cfg.listen = match a.listen.as_str() {
                "off" | "" => None,
                addr => Some(addr.parse().map_err(|e| {
                    Error::config(format!("--listen {addr:?} is not an address like 0.0.0.0:8080 ({e})"))
                })?),
            };
            cfg.sse_tokens = crate::sse::Tokens::load(
                std::env::var("HIGHWATER_SSE_TOKENS").ok().as_deref(),
                a.sse_tokens_file.as_deref(),
            )?;
            cfg.ops_tokens = crate::sse::Tokens::load_named(
                "ops",
                std::env::var("HIGHWATER_OPS_TOKENS").ok().as_deref(),
                a.ops_tokens_file.as_deref(),
            )?;
            cfg.webhook_targets =
                std::sync::Arc::new(crate::sink::TargetPolicy::new(&a.webhook_allow, a.webhook_block_private)?);
            // Traces (docs/observability.md, "Tracing"): off unless OTEL_* asks for them.
            let traces = crate::trace::config::from_env(|k| std::env::var(k).ok())?;
            let traces = crate::trace::init(traces, "highwater-dispatcher", &instance_id, &a.group)?;
            let res = dispatch::run(pool, cfg, shutdown).await;
            if let Some(t) = traces {
                t.shutdown(std::time::Duration::from_secs(5)).await;
            }
            res?;
        }
        Command::Consumer(c) => {
            let url = require_url(&g)?;
            let pool = db::connect(&url, 2).await?;
            db::check_migrated(&pool, &url).await?;
            let traces = cli_traces();
            let res = consumer::run(&pool, c).await;
            end_traces(traces).await;
            res?;
        }
        Command::Events(c) => {
            let url = require_url(&g)?;
            let pool = db::connect(&url, 2).await?;
            db::check_migrated(&pool, &url).await?;
            let traces = cli_traces();
            let res = events::run(&pool, c).await;
            end_traces(traces).await;
            res?;
        }
        Command::EventTypes(c) => {
            let url = require_url(&g)?;
            let pool = db::connect(&url, 1).await?;
            db::check_migrated(&pool, &url).await?;
            event_types_cli::run(&pool, c).await?;
        }
        Command::Quickstart(a) => quickstart::run(g.database_url, a).await?,
        Command::Console(a) => {
            // The operations it runs are spans of service `highwater-console` (OTEL_* as above).
            let traces = traces_as("highwater-console");
            let res = console::run(&require_url(&g)?, &a).await;
            end_traces(traces).await;
            res?;
        }
        Command::Roles(a) => roles::run(&a, g.database_url.as_deref())?,
        Command::Doctor(a) => {
            let code = doctor::run(&require_url(&g)?, &a).await;
            if code != 0 {
                std::process::exit(i32::from(code));
            }
        }
    }
    Ok(())
}

/// The CLI's traces: the span of each operation run (`highwater_ops::span`), exported as service
/// `highwater-cli` when the `OTEL_*` variables ask for it, as the dispatcher's are.
fn cli_traces() -> Option<crate::trace::Tracing> {
    traces_as("highwater-cli")
}

/// A shell's `OTEL_*` often belongs to other tools (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`): what
/// the dispatcher refuses at start only costs a command its spans, with the refusal as a warning.
fn traces_as(service: &str) -> Option<crate::trace::Tracing> {
    let started = crate::trace::config::from_env(|k| std::env::var(k).ok())
        .and_then(|cfg| crate::trace::init(cfg, service, &format!("{service}:{}", consumer::os_user()), ""));
    started.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "traces: not exported by this command");
        None
    })
}

/// Exports what the command traced, within 2 s (an unreachable backend does not hold it longer).
async fn end_traces(traces: Option<crate::trace::Tracing>) {
    if let Some(t) = traces {
        t.shutdown(std::time::Duration::from_secs(2)).await;
    }
}
