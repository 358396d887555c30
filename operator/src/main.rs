use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = highwater_operator::cli::Cli::parse();
    match highwater_operator::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            highwater::logging::print_error(e);
            std::process::ExitCode::FAILURE
        }
    }
}
