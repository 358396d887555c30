//! Polling until a condition holds, for the harness and the tests.
use std::{
    fmt::Display,
    future::Future,
    time::{Duration, Instant},
};

use anyhow::{Result, anyhow};

/// Calls `check` every 200 ms until it returns `Ok(Some(value))`. `Ok(None)` means not yet; an
/// error counts as not yet too (the API may be briefly unavailable) and is reported if `timeout`
/// passes.
pub async fn wait_for<T, E, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, E>>,
    E: Display,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        if Instant::now() > deadline {
            return Err(match last {
                Some(e) => anyhow!("timed out after {timeout:?} waiting for {what}; last error: {e}"),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `f` until it is true, panicking with `what` once `timeout` passes: [`wait_for`] for a
/// test's yes-or-no condition.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let check = || {
        let fut = f();
        async move { Ok::<_, std::convert::Infallible>(fut.await.then_some(())) }
    };
    wait_for(what, timeout, check).await.unwrap_or_else(|e| panic!("{e}"));
}
