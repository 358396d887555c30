//! `highwater doctor`: the findings as a list a person reads, or JSON for a script; the exit
//! code is the worst finding (0 ok, 1 warnings, 2 errors).
use clap::Args;

use super::Output;
use crate::doctor::{self, Finding, Level, Role};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Whose DATABASE_URL this is: the privileges checked are that role's.
    #[arg(long = "as", value_enum, default_value = "dispatcher")]
    pub role: Role,
    /// A transaction holding the fence back longer than this is a warning.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub long_transaction: std::time::Duration,
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: Output,
}

/// Runs every check and prints them; returns the exit code.
pub async fn run(url: &str, a: &DoctorArgs) -> u8 {
    let findings = doctor::run(url, a.role, a.long_transaction).await;
    let code = doctor::exit_code(&findings);
    match a.output {
        Output::Json => {
            let status = ["ok", "warnings", "errors"][usize::from(code)];
            let doc = serde_json::json!({ "status": status, "findings": findings });
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        Output::Table => {
            for f in &findings {
                print_one(f);
            }
        }
    }
    code
}

fn print_one(f: &Finding) {
    let level = match f.level {
        Level::Ok => "ok",
        Level::Warning => "WARN",
        Level::Error => "ERROR",
    };
    println!("{level:<5} {:<10} {}", f.check, f.message);
    if let Some(fix) = &f.fix {
        println!("{:<16} fix: {fix}", "");
    }
}
