use clap::Parser;
use highwater::cli::{Cli, init_tracing, run};

// glibc's allocator grew and trimmed its heap on every batch of events, page faults included
// (docs/bench/history.md); mimalloc keeps freed pages for the next batch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.global.log_format);
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A transaction pooler met after the start check (its mode changed) is named too.
            highwater::logging::print_error(highwater::pooler::diagnose(e));
            std::process::ExitCode::FAILURE
        }
    }
}
