//! `/metrics`, `/healthz`, `/readyz` of the operator. The health route is outside any layer.
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(|State(s): State<AppState>| async move { s.metrics.encode() }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready_handler))
        .with_state(AppState { metrics, ready });
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
        tracing::error!(error = %e, "HTTP server failed");
    }
}

async fn ready_handler(State(s): State<AppState>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: starting\n")
    }
}
