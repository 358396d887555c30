//! The long chaos run, by hand: `cargo build --release -p highwater --bin highwater && cargo run
//! --release -p highwater-e2e --bin chaos -- --duration 10m` (add `--xid-boundary 10000000000` to
//! cross a power of ten at epoch 2). Prints the figures; exits 1 when a promise broke (loss, a
//! duplicate from the SQL sink, too many redeliveries, a cursor moving backwards other than by a
//! rewind, an event pruned before a live shard passed it, a rewind or a skip not keeping its
//! promise, no boundary crossed).
use clap::Parser;
use highwater_e2e::chaos;

#[derive(Parser)]
#[command(about = "Faults under load, then an audit of every consumer: zero loss or exit 1")]
struct Args {
    #[command(flatten)]
    config: chaos::Config,
    /// Keep the logs (each dispatcher's, the log sink's file) in this directory.
    #[arg(long)]
    keep_logs: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let work = match &args.keep_logs {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => tmp.path().to_path_buf(),
    };
    let report = chaos::run(args.config, &work).await?;
    println!("{report}");
    let violations = report.violations();
    if violations.is_empty() {
        println!("chaos: every promise held");
        Ok(())
    } else {
        for v in &violations {
            eprintln!("chaos: BROKEN: {v}");
        }
        eprintln!("chaos: logs in {}", work.display());
        std::mem::forget(tmp);
        std::process::exit(1);
    }
}
