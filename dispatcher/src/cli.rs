//! The `highwater` command line. `main.rs` only parses and calls [`run`].
use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use crate::{Error, NewEvent, Result, db, definitions, dispatch, event_types, instance, ops, quickstart};

#[derive(Parser, Debug)]
#[command(name = "highwater", version, about = "Gap-free post-commit event delivery from PostgreSQL")]
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
    /// Log format on stderr.
    #[arg(long, env = "HIGHWATER_LOG_FORMAT", value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Apply the schema migrations (idempotent).
    Migrate,
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
    /// Start an embedded PostgreSQL (unless DATABASE_URL is set), apply the examples, run several
    /// dispatchers, append sample events and show delivery and lag live.
    Quickstart(quickstart::QuickstartArgs),
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
    /// Polling interval while LISTEN is down or events wait above the fence.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,
    /// Safety-net polling interval while LISTEN works.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub idle_poll_interval: Duration,
    /// How long SIGTERM waits for passes in flight.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Database connections (each shard being delivered holds one).
    #[arg(long, default_value_t = 16)]
    pub max_connections: u32,
    /// How long to keep retrying an unreachable database at start.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
}

#[derive(Subcommand, Debug)]
pub enum ConsumerCmd {
    /// Create or update consumers from EventConsumer YAML (a file or a directory).
    Apply {
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
    },
    /// Every shard with status, cursor and lag.
    List {
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// The shards of one consumer.
    Status {
        name: String,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Delete a consumer and its cursors.
    Delete { name: String },
}

#[derive(Subcommand, Debug)]
pub enum EventsCmd {
    /// Append one event (in its own transaction).
    Append {
        #[arg(long)]
        stream_type: String,
        #[arg(long)]
        stream_id: String,
        #[arg(long = "type")]
        event_type: String,
        /// JSON payload, or @FILE.
        #[arg(long)]
        payload: String,
        /// JSON object of metadata, or @FILE.
        #[arg(long)]
        metadata: Option<String>,
        #[arg(long)]
        tenant: Option<String>,
        /// The stream's current version (0 for a new stream); refused on mismatch.
        #[arg(long)]
        expected_version: Option<i64>,
    },
}

#[derive(Subcommand, Debug)]
pub enum EventTypesCmd {
    /// Register an event type, optionally with a JSON Schema for its payload.
    Register {
        name: String,
        #[arg(long)]
        schema: Option<PathBuf>,
        #[arg(long)]
        description: Option<String>,
    },
    List,
}

pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HIGHWATER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn require_url(g: &Global) -> Result<String> {
    g.database_url.clone().ok_or_else(|| {
        Error::Config(
            "no database given\n  fix: set DATABASE_URL or pass --database-url \
             (or run `highwater quickstart`, which starts its own)"
                .into(),
        )
    })
}

fn json_arg(text: &str, what: &str) -> Result<serde_json::Value> {
    let body = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(Error::io(format!("reading {what} file {path}")))?,
        None => text.to_owned(),
    };
    serde_json::from_str(&body).map_err(|e| Error::Config(format!("{what} is not valid JSON: {e}")))
}

/// Resolves SIGTERM and Ctrl-C into a cancellation.
pub fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("signal received");
        t.cancel();
    });
    token
}

pub async fn run(cli: Cli) -> Result<()> {
    let g = cli.global;
    match cli.command {
        Command::Migrate => {
            let url = require_url(&g)?;
            let pool = db::connect(&url, 2).await?;
            db::migrate(&pool).await?;
            println!("migrations applied to {}", db::describe_target(&url));
        }
        Command::Dispatch(a) => {
            let url = require_url(&g)?;
            let instance_id = instance::resolve(a.instance_id.as_deref())?;
            let shutdown = shutdown_signal();
            let pool = tokio::select! {
                p = db::connect_with_retry(&url, a.max_connections, a.connect_timeout) => p?,
                _ = shutdown.cancelled() => return Ok(()),
            };
            db::check_migrated(&pool, &url).await?;
            if let Some(path) = &a.consumers {
                let defs = definitions::load(path)?;
                definitions::apply(&pool, &defs).await?;
            }
            let mut cfg = dispatch::DispatchConfig::new(&a.group, &instance_id);
            cfg.poll_interval = a.poll_interval;
            cfg.idle_poll_interval = a.idle_poll_interval;
            cfg.shutdown_grace = a.shutdown_grace;
            dispatch::run(pool, cfg, shutdown).await?;
        }
        Command::Consumer(c) => {
            let url = require_url(&g)?;
            let pool = db::connect(&url, 2).await?;
            db::check_migrated(&pool, &url).await?;
            consumer(&pool, c).await?;
        }
        Command::Events(EventsCmd::Append {
            stream_type,
            stream_id,
            event_type,
            payload,
            metadata,
            tenant,
            expected_version,
        }) => {
            let url = require_url(&g)?;
            let pool = db::connect(&url, 1).await?;
            db::check_migrated(&pool, &url).await?;
            let ev = NewEvent {
                stream_type,
                stream_id,
                event_type,
                payload: json_arg(&payload, "--payload")?,
                metadata: metadata.as_deref().map(|m| json_arg(m, "--metadata")).transpose()?,
                tenant_id: tenant,
                expected_version,
            };
            let mut tx = pool.begin().await?;
            let id = crate::append(&mut tx, &ev).await?;
            tx.commit().await?;
            println!("{id}");
        }
        Command::EventTypes(c) => {
            let url = require_url(&g)?;
            let pool = db::connect(&url, 1).await?;
            db::check_migrated(&pool, &url).await?;
            match c {
                EventTypesCmd::Register { name, schema, description } => {
                    let schema = schema.map(|p| json_arg(&format!("@{}", p.display()), "--schema")).transpose()?;
                    event_types::register(&pool, &name, schema.as_ref(), description.as_deref()).await?;
                    println!("event type {name} registered");
                }
                EventTypesCmd::List => {
                    for t in event_types::list(&pool).await? {
                        let schema = if t.json_schema.is_some() { "schema" } else { "-" };
                        println!("{:<40} {:<7} {}", t.event_type, schema, t.description.unwrap_or_default());
                    }
                }
            }
        }
        Command::Quickstart(a) => quickstart::run(g.database_url, a).await?,
    }
    Ok(())
}

async fn consumer(pool: &sqlx::PgPool, c: ConsumerCmd) -> Result<()> {
    match c {
        ConsumerCmd::Apply { file } => {
            let defs = definitions::load(&file)?;
            if defs.is_empty() {
                return Err(Error::Refused(format!("{} holds no EventConsumer", file.display())));
            }
            for (name, outcome) in definitions::apply(pool, &defs).await? {
                let word = match outcome {
                    definitions::Applied::Created => "created",
                    definitions::Applied::Updated => "configured",
                    definitions::Applied::Unchanged => "unchanged",
                };
                println!("eventconsumer/{name} {word}");
            }
        }
        ConsumerCmd::List { output } => print_status(&ops::status(pool, None).await?, output)?,
        ConsumerCmd::Status { name, output } => {
            let rows = ops::status(pool, Some(&name)).await?;
            if rows.is_empty() {
                let exists: bool =
                    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM highwater.consumers WHERE name = $1)")
                        .bind(&name)
                        .fetch_one(pool)
                        .await?;
                if exists {
                    println!("consumer {name} has no shards yet: no dispatcher of its group has started");
                    return Ok(());
                }
                return Err(Error::Refused(format!(
                    "no consumer named {name:?}; `highwater consumer list` shows them"
                )));
            }
            print_status(&rows, output)?;
        }
        ConsumerCmd::Delete { name } => {
            definitions::delete(pool, &name).await?;
            println!("eventconsumer/{name} deleted");
        }
    }
    Ok(())
}

fn print_status(rows: &[ops::ShardStatus], output: Output) -> Result<()> {
    match output {
        Output::Table => print!("{}", ops::render_table(rows)),
        Output::Json => println!("{}", serde_json::to_string_pretty(rows).map_err(|e| Error::Config(e.to_string()))?),
    }
    Ok(())
}
