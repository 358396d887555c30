//! `highwater consumer …`
use std::path::PathBuf;

use clap::Subcommand;

use super::Output;
use crate::{Error, Result, definitions, ops};

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

pub async fn run(pool: &sqlx::PgPool, c: ConsumerCmd) -> Result<()> {
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
