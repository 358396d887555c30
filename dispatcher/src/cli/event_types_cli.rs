//! `highwater event-types …`: the registry of event types, their versions, compatibility modes,
//! upcasts and former names (docs/events.md, "Versions").
use std::path::PathBuf;

use clap::Subcommand;

use super::{Output, json_arg};
use crate::{
    Error, Result, event_types,
    table::{self, Align},
};

#[derive(Subcommand, Debug)]
pub enum EventTypesCmd {
    /// Register an event type, or a new version of one. Idempotent: registering what is
    /// registered changes nothing. Without --version: a new type gets version 1; for a registered
    /// type, no --schema (or the latest version's schema) changes nothing, another schema is
    /// refused (a new schema is a new version: --version N).
    #[command(after_help = "Examples:
  highwater event-types register OrderPlaced --schema OrderPlaced.v1.json
  highwater event-types register OrderPlaced --version 2 --schema OrderPlaced.v2.json \\
      --upcast \"jsonb_set(payload, '{currency}', '\\\"EUR\\\"')\"
  highwater event-types register OrderPlaced --compatibility full_transitive

A new version is checked against the earlier ones under the type's compatibility mode, and its
upcast (if any) is run over every stored event of the earlier versions (a dry run, nothing
written): refused with the incompatible paths or the failing event, nothing changed.")]
    Register {
        name: String,
        /// The version to register: the next one (latest + 1), or a registered one (checked to be
        /// the same).
        #[arg(long, value_name = "N")]
        version: Option<i32>,
        /// JSON Schema of the payload (a file); none: any JSON payload.
        #[arg(long, value_name = "FILE")]
        schema: Option<PathBuf>,
        /// With --version N above 1: a SQL expression over `payload` (jsonb) that turns a payload
        /// of version N-1 into one of version N, applied on read for consumers with
        /// `eventVersions: latest` and by `events read --latest`.
        #[arg(long, value_name = "EXPR", requires = "version")]
        upcast: Option<String>,
        /// backward (default), backward_transitive, forward, forward_transitive, full,
        /// full_transitive or none: checked when a version is registered; the type's mode from
        /// now on.
        #[arg(long, value_name = "MODE")]
        compatibility: Option<String>,
        #[arg(long)]
        description: Option<String>,
    },
    /// Every registered type: latest version, compatibility mode, schema, former names.
    List {
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// One type: each version with its schema and upcast, and the stored events per version.
    Show {
        name: String,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Apply the `EventType` documents of a YAML file (the operator's resource, e.g.
    /// examples/order-event-types.yaml) to the registry outside Kubernetes, in one transaction:
    /// every version each declares is registered, or nothing changes and the refusal names the
    /// document. `EventConsumer` documents beside them are passed over (`consumer apply -f`).
    #[command(after_help = "Example:
  highwater event-types apply -f examples/order-event-types.yaml")]
    Apply {
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: PathBuf,
    },
    /// Rename a type: NEW is registered with OLD's versions (unless it exists), and OLD becomes a
    /// former name of NEW, so consumers of NEW also get the events stored as OLD (upcast with
    /// NEW's versions when they ask for the latest). OLD stays registered: its events name it.
    Rename { old: String, new: String },
}

pub async fn run(pool: &sqlx::PgPool, c: EventTypesCmd) -> Result<()> {
    match c {
        EventTypesCmd::Register { name, version, schema, upcast, compatibility, description } => {
            let schema = schema.map(|p| json_arg(&format!("@{}", p.display()), "--schema")).transpose()?;
            let mode = compatibility.as_deref().map(str::parse::<event_types::Compatibility>).transpose()?;
            match version {
                Some(v) => {
                    let a = event_types::register_version(
                        pool,
                        &name,
                        v,
                        schema.as_ref(),
                        upcast.as_deref(),
                        mode,
                        description.as_deref(),
                    )
                    .await?;
                    report(&name, &a);
                }
                None => {
                    event_types::register(pool, &name, schema.as_ref(), description.as_deref()).await?;
                    if let Some(m) = mode {
                        let t =
                            event_types::get(pool, &name).await?.ok_or_else(|| Error::Internal("registered".into()))?;
                        event_types::apply_type(pool, &event_types::TypeSpec { compatibility: m, ..t.spec() }).await?;
                    }
                    println!("event type {name} registered");
                }
            }
        }
        EventTypesCmd::Apply { file } => apply(pool, &file).await?,
        EventTypesCmd::List { output } => {
            let types = event_types::list_types(pool).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&types)?),
                Output::Table => {
                    let rows = types.iter().map(|t| {
                        let schema = if t.versions.last().is_some_and(|v| v.schema.is_some()) { "schema" } else { "-" };
                        let mut desc = t.description.clone().unwrap_or_default();
                        if let Some(of) = &t.alias_of {
                            desc = format!("(former name of {of}) {desc}");
                        } else if !t.aliases.is_empty() {
                            desc = format!("(formerly {}) {desc}", t.aliases.join(", "));
                        }
                        let latest = format!("v{}", t.latest);
                        vec![t.event_type.clone(), latest, t.compatibility.to_string(), schema.into(), desc]
                    });
                    let columns = [
                        ("TYPE", Align::Left),
                        ("LATEST", Align::Left),
                        ("COMPATIBILITY", Align::Left),
                        ("SCHEMA", Align::Left),
                        ("DESCRIPTION", Align::Left),
                    ];
                    print!("{}", table::render(0, &columns, rows));
                }
            }
        }
        EventTypesCmd::Show { name, output } => {
            let Some(t) = event_types::get(pool, &name).await? else {
                return Err(Error::refused(format!("event type {name:?} is not registered"))
                    .with_fix("`highwater event-types list` shows the registered types (names are case-sensitive)"));
            };
            let counts = event_types::version_counts(pool, &name).await?;
            match output {
                Output::Json => {
                    println!("{}", serde_json::to_string_pretty(&serde_json::json!({"type": t, "events": counts}))?)
                }
                Output::Table => {
                    println!("type:          {}", t.event_type);
                    if let Some(d) = &t.description {
                        println!("description:   {d}");
                    }
                    println!("compatibility: {}", t.compatibility);
                    println!("latest:        {}", t.latest);
                    if !t.aliases.is_empty() {
                        println!("former names:  {}", t.aliases.join(", "));
                    }
                    if let Some(of) = &t.alias_of {
                        println!("renamed to:    {of}");
                    }
                    for v in &t.versions {
                        let n = counts.iter().find(|c| c.version == v.version).map_or(0, |c| c.events);
                        println!("version {} ({n} stored events)", v.version);
                        match &v.schema {
                            Some(s) => println!("  schema: {s}"),
                            None => println!("  schema: - (any JSON payload)"),
                        }
                        if let Some(u) = &v.upcast {
                            println!("  upcast from {}: {u}", v.version - 1);
                        }
                    }
                }
            }
        }
        EventTypesCmd::Rename { old, new } => {
            let a = event_types::rename(pool, &old, &new).await?;
            println!(
                "{old} is a former name of {new} (latest version {}): consumers of {new} also get the events stored as {old}",
                a.latest
            );
        }
    }
    Ok(())
}

async fn apply(pool: &sqlx::PgPool, file: &std::path::Path) -> Result<()> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::refused(format!("cannot read {}: {e}", file.display())).with_fix("pass the path of a YAML file with -f")
    })?;
    let (docs, consumers) = event_types::parse_documents(&text, &file.display().to_string())?;
    if docs.is_empty() {
        return Err(Error::refused(format!("{} holds no EventType document", file.display()))
            .with_fix("declare types as in examples/order-event-types.yaml (kind: EventType)"));
    }
    // One transaction: a file is one change to the registry, as a commit to the Git folder is.
    let mut tx = pool.begin().await?;
    let mut applied = Vec::new();
    for d in &docs {
        let a = event_types::apply_type_in(&mut tx, &event_types::TypeSpec::from(&d.spec))
            .await
            .map_err(|e| e.in_context(&format!("{}: ", d.origin)))?;
        applied.push((d.spec.event_type.clone(), a));
    }
    tx.commit().await?;
    for (name, a) in &applied {
        report(name, a);
    }
    if consumers > 0 {
        println!("passed over {consumers} EventConsumer document(s): `highwater consumer apply -f` applies those");
    }
    Ok(())
}

fn report(name: &str, a: &event_types::Applied) {
    if a.registered.is_empty() {
        println!("event type {name} already registered as given (latest version {})", a.latest);
    } else {
        let list: Vec<String> = a.registered.iter().map(i32::to_string).collect();
        println!("event type {name}: version {} registered (latest {})", list.join(", "), a.latest);
    }
    for n in &a.notes {
        println!("note: {n}");
    }
}
