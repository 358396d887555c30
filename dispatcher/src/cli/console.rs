//! `highwater console`: the web console (crate `highwater-console`, docs/console.md). Only the
//! flags live here.
use std::{net::SocketAddr, path::PathBuf};

use clap::Args;
use highwater_console::{Auth, Config};

use crate::{Error, Result, db, shutdown::shutdown_signal};

#[derive(Args, Debug)]
pub struct ConsoleArgs {
    /// Address to serve the console on. Beyond loopback, put it behind an authenticating proxy
    /// (docs/console.md); without any authentication configured it is read-only.
    #[arg(long, env = "HIGHWATER_CONSOLE_LISTEN", default_value = "127.0.0.1:8090")]
    pub listen: String,
    /// File of ops tokens (one per line) a user logs in with to act (redrive, discard); also from
    /// HIGHWATER_OPS_TOKENS (comma-separated). The same tokens as the dispatcher's ops endpoints.
    #[arg(long, env = "HIGHWATER_OPS_TOKENS_FILE")]
    pub ops_tokens_file: Option<PathBuf>,
    /// A header an authenticating proxy in front sets to the user's name (oauth2-proxy:
    /// X-Forwarded-User); believed only from --trusted-proxy addresses.
    #[arg(long, env = "HIGHWATER_CONSOLE_TRUSTED_USER_HEADER")]
    pub trusted_user_header: Option<String>,
    /// An address or network of that proxy (10.0.0.5, 10.0.0.0/24); repeat or separate with commas.
    #[arg(long = "trusted-proxy", env = "HIGHWATER_CONSOLE_TRUSTED_PROXY", value_delimiter = ',')]
    pub trusted_proxies: Vec<String>,
    /// Database connections.
    #[arg(long, default_value_t = 4)]
    pub max_connections: u32,
}

pub async fn run(url: &str, a: &ConsoleArgs) -> Result<()> {
    let listen: SocketAddr = a.listen.parse().map_err(|e| {
        Error::config(format!("--listen {:?} is not an address ({e})", a.listen))
            .with_fix("e.g. --listen 127.0.0.1:8090")
    })?;
    let trusted_proxies = a
        .trusted_proxies
        .iter()
        .map(|p| {
            let p = p.trim();
            p.parse::<ipnet::IpNet>().or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from)).map_err(|_| {
                Error::config(format!("--trusted-proxy {p:?} is not an address or a network"))
                    .with_fix("e.g. --trusted-proxy 10.0.0.5 or --trusted-proxy 10.0.0.0/24")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let ops_tokens = highwater_ops::load_tokens(
        "ops",
        std::env::var("HIGHWATER_OPS_TOKENS").ok().as_deref(),
        a.ops_tokens_file.as_deref(),
    )?;
    let auth = Auth { ops_tokens, trusted_user_header: a.trusted_user_header.clone(), trusted_proxies };
    auth.check()?;
    let pool = db::connect(url, a.max_connections).await?;
    let stop = shutdown_signal();
    highwater_console::serve(pool, Config { listen, auth }, async move { stop.cancelled().await }).await
}
