//! `highwater-operator`: `run` (the default) and `crd`.
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "highwater-operator", version, about = "Kubernetes operator for highwater EventConsumers")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the EventConsumer CustomResourceDefinition as YAML.
    Crd,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Crd) => print!("{}", highwater_crds::crd_yaml()),
        None => anyhow::bail!("not implemented yet"),
    }
    Ok(())
}
