//! Process shutdown: SIGTERM and Ctrl-C as one cancellation, for every long-running command of
//! the dispatcher, the quickstart and the operator.
use tokio_util::sync::CancellationToken;

/// Resolves SIGTERM and Ctrl-C (SIGINT) into a cancellation.
pub fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        };
        // Cancel first: nothing after the signal, a log line included, may keep the process up.
        t.cancel();
        tracing::info!(signal = which, "signal received");
    });
    token
}
