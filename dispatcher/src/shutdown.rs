//! Process shutdown: SIGTERM and Ctrl-C as one cancellation, for every long-running command of
//! the dispatcher, the quickstart and the operator.
use tokio_util::sync::CancellationToken;

/// Resolves SIGTERM and Ctrl-C into a cancellation.
pub fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("signal received");
        t.cancel();
    });
    token
}
