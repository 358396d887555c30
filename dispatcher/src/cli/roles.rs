//! `highwater roles --print`: the SQL of highwater's least-privilege database roles
//! ([`crate::roles`]; docs/security.md, "Database roles").
use clap::Args;

use crate::{Error, Result, roles::Roles};

#[derive(Args, Debug)]
pub struct RolesArgs {
    /// Print the SQL (CREATE ROLE, GRANT, ALTER DEFAULT PRIVILEGES) on stdout; it changes nothing.
    #[arg(long)]
    pub print: bool,
    /// The schema owner: runs `highwater migrate`; no superuser, CREATE on the database only.
    #[arg(long, default_value = "highwater_owner")]
    pub owner: String,
    /// The dispatcher's role (also for the CLI's consumer and events commands).
    #[arg(long, default_value = "highwater_dispatcher")]
    pub dispatcher: String,
    /// The operator's role.
    #[arg(long, default_value = "highwater_operator")]
    pub operator: String,
    /// The applications' role (append, tokens, waits).
    #[arg(long, default_value = "highwater_app")]
    pub application: String,
    /// A `sink.sql.role` (repeatable): created NOLOGIN, the dispatcher made a member.
    #[arg(long = "sql-sink-role")]
    pub sql_sink_roles: Vec<String>,
    /// The database the roles connect to (default: the database of DATABASE_URL, else postgres).
    #[arg(long)]
    pub database: Option<String>,
}

pub fn run(a: &RolesArgs, database_url: Option<&str>) -> Result<()> {
    if !a.print {
        return Err(Error::config("highwater roles changes nothing by itself")
            .with_fix("pass --print and run the SQL it prints (docs/security.md, \"Database roles\")"));
    }
    let database =
        a.database.clone().or_else(|| database_url.and_then(database_of)).unwrap_or_else(|| "postgres".into());
    let roles = Roles {
        owner: a.owner.clone(),
        dispatcher: a.dispatcher.clone(),
        operator: a.operator.clone(),
        application: a.application.clone(),
        sql_sink_roles: a.sql_sink_roles.clone(),
        database,
    };
    print!("{}", roles.render(crate::VERSION));
    Ok(())
}

fn database_of(url: &str) -> Option<String> {
    use std::str::FromStr;
    sqlx::postgres::PgConnectOptions::from_str(url).ok()?.get_database().map(str::to_owned)
}
