//! The dispatcher's HTTP server: `/metrics`, `/healthz`, `/readyz`, the SSE streams and the
//! read-your-writes wait (`/v1/consumers/{name}/applied`), the redrive of dead letters
//! (`/v1/consumers/{name}/redrive`) and their discard (`…/discard`), the replay of a stream (`/v1/consumers/{name}/replay`),
//! and `/openapi.json`, their description (docs/openapi.json, embedded; tests/openapi.rs keeps
//! it true to this router).
use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    middleware,
    response::IntoResponse,
    routing::{get, post},
};
use highwater_store::pg::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{discard_http, metrics::Metrics, ops_http, redrive_http, sse, wait_http};
use highwater_store::{Error, Result};

#[derive(Clone)]
pub struct Health {
    pub pool: PgPool,
    /// Set once migrations are checked and every shard is registered.
    pub ready: Arc<AtomicBool>,
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Health,
}

pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        Error::config(format!("cannot listen on {addr} for metrics, health and SSE: {e}"))
            .with_fix("pass another --listen / HIGHWATER_LISTEN")
    })
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    health: Health,
    sse: sse::SseState,
    ops: redrive_http::OpsState,
    stop: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready_handler))
        .route("/openapi.json", get(openapi_handler))
        .with_state(AppState { metrics, health })
        .merge(
            Router::new()
                .route("/v1/consumers/{name}/events", get(sse::stream_handler))
                .route("/v1/consumers/{name}/applied", get(wait_http::applied_handler))
                .with_state(sse),
        )
        .merge(
            Router::new()
                .route("/v1/consumers/{name}/redrive", post(redrive_http::redrive_handler))
                .route("/v1/consumers/{name}/replay", post(redrive_http::replay_handler))
                .route("/v1/consumers/{name}/discard", post(discard_http::discard_handler))
                // The token before anything of the request is read (routes that match only).
                .route_layer(middleware::from_fn_with_state(ops.tokens.clone(), ops_http::require_ops_token))
                .with_state(ops),
        )
        // A path no route matches: plain text, as every other refusal of this server.
        .fallback(|| async { (StatusCode::NOT_FOUND, "no such endpoint: GET /openapi.json lists them\n") });
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
        tracing::error!(error = %e, "HTTP server failed");
    }
}

async fn metrics_handler(State(st): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], st.metrics.encode())
}

/// The OpenAPI 3.1 description of this server, as committed under docs/.
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

async fn openapi_handler() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

async fn ready_handler(State(st): State<AppState>) -> impl IntoResponse {
    if !st.health.ready.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: starting (database not reached yet, or shards not registered yet)\n".to_owned(),
        );
    }
    let probe = tokio::time::timeout(Duration::from_secs(2), highwater_store::db::ping(&st.health.pool)).await;
    match probe {
        Ok(Ok(_)) => (StatusCode::OK, "ready\n".to_owned()),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: database: {e}\n")),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "not ready: database did not answer within 2s\n".to_owned()),
    }
}
