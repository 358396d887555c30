//! `highwater console`: a web server for the people on call. Server-rendered HTML (maud escapes
//! every value it renders, so a payload or an error is text, never markup), htmx embedded in the
//! binary for the live parts, a Content-Security-Policy without inline scripts. It reads through
//! the store's typed queries (`highwater_store::console`, `ops::status`) and acts only through
//! `highwater_ops` operations, audited with the console user as "who" (docs/console.md).
mod actions;
mod assets;
mod auth;
mod consumer;
mod dead_letters;
mod error;
mod event_types;
mod form;
mod health;
mod mask;
mod overview;
mod page;
mod shard_actions;
mod streams;

use std::{future::Future, net::SocketAddr, sync::Arc};

use axum::{
    Router, middleware,
    routing::{get, post},
};
use highwater_store::{Error, Result, pg::PgPool};

pub use auth::Auth;

/// How the console is started (`highwater console`'s flags).
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub auth: Auth,
}

#[derive(Clone)]
pub(crate) struct Console {
    pub pool: PgPool,
    pub auth: Arc<auth::Sessions>,
    pub health: Arc<health::Health>,
}

/// The console's routes over `pool`.
pub fn router(pool: PgPool, auth: Auth) -> Router {
    let st = Console { pool, auth: Arc::new(auth::Sessions::new(auth)), health: Arc::default() };
    Router::new()
        .route("/", get(overview::page))
        .route("/overview/table", get(overview::table_fragment))
        .route("/consumers/{name}", get(consumer::page))
        .route("/consumers/{name}/act", post(shard_actions::act))
        .route("/dead-letters", get(dead_letters::page))
        .route("/streams", get(streams::page))
        .route("/events/{id}", get(streams::event))
        .route("/correlations/{id}", get(streams::correlation))
        .route("/event-types", get(event_types::list))
        .route("/event-types/{name}", get(event_types::show))
        .route("/dead-letters/preview", post(actions::preview))
        .route("/dead-letters/execute", post(actions::execute))
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/assets/{file}", get(assets::serve))
        // The process answers (the chart's probes); the pages say whether the database does.
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(middleware::from_fn_with_state(st.clone(), auth::identify))
        .layer(middleware::from_fn(page::security_headers))
        .with_state(st)
}

/// Serves the console on `cfg.listen` until `shutdown` completes. Without any way to
/// authenticate (no ops tokens, no trusted proxy header) it is read-only, and says so in the log
/// and on every page.
pub async fn serve(pool: PgPool, cfg: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
    cfg.auth.check()?;
    let listener = tokio::net::TcpListener::bind(cfg.listen).await.map_err(|e| {
        Error::config(format!("--listen {}: cannot listen there ({e})", cfg.listen))
            .with_fix("pick a free port, e.g. --listen 127.0.0.1:8090")
    })?;
    let local = listener.local_addr().map_err(Error::io("reading the console's address"))?;
    if let Some(why) = cfg.auth.read_only_reason() {
        if local.ip().is_loopback() {
            tracing::info!("console on http://{local}/ is read-only: {why}");
        } else {
            tracing::warn!(
                "console on http://{local}/ listens beyond loopback without authentication: read-only ({why})"
            );
        }
    } else {
        tracing::info!("console on http://{local}/");
    }
    let app = router(pool, cfg.auth).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await.map_err(Error::io("serving the console"))?;
    Ok(())
}
