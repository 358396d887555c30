//! Running a kube-runtime `Controller` until a cancellation, including one that comes before the
//! controller's first list.
//!
//! kube-runtime holds its reconcile runner until the watched store is ready (the first full list),
//! and a graceful shutdown stops polling the watch that would make it ready: a SIGTERM in the
//! first moments after start left the runner waiting forever and the operator never exited
//! (seen in CI: "signal received", then nothing for 60 s). Before the store is ready no reconcile
//! can have started, so there is nothing to wait for: stop at once.
use std::future::Future;

use futures::FutureExt;
use kube::{Resource, runtime::reflector::Store};
use tokio_util::sync::CancellationToken;

/// Drives `run` (a controller's `for_each` future, itself shut down gracefully on `stop`) to its
/// end, or returns as soon as `stop` fires while `store` has not had its first list.
pub async fn run_controller<K>(run: impl Future<Output = ()>, store: Store<K>, stop: CancellationToken)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let never_listed = async move {
        stop.cancelled().await;
        if store.wait_until_ready().now_or_never().is_none() {
            tracing::debug!("stopping before the first list: no reconcile to wait for");
            return;
        }
        // Listed: the graceful shutdown of `run` waits for running reconciles.
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = run => {}
        _ = never_listed => {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use highwater_crds::EventConsumer;
    use http::{Request, Response};
    use kube::{
        Api,
        client::Body,
        runtime::{Controller, controller::Action, watcher},
    };

    use futures::StreamExt;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    /// The API server takes the list request and never answers (a slow or unreachable server at
    /// start): a cancellation still ends the controller.
    #[tokio::test]
    async fn a_stop_before_the_first_list_ends_the_controller() {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<EventConsumer> = Api::all(kube::Client::new(svc, "default"));
        let stop = CancellationToken::new();
        let controller = Controller::new(api, watcher::Config::default());
        let store = controller.store();
        let graceful = stop.clone();
        let run = controller
            .graceful_shutdown_on(async move { graceful.cancelled().await })
            .run(
                |_ec, _ctx: std::sync::Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
                |_, _, _| Action::await_change(),
                std::sync::Arc::new(()),
            )
            .for_each(|_| async {});
        let task = tokio::spawn(run_controller(run, store, stop.clone()));
        // The controller has asked for its first list, which is left unanswered.
        let (req, _unanswered) = handle.next_request().await.expect("the first list");
        assert_eq!(req.uri().path(), "/apis/highwater.dev/v1alpha1/eventconsumers");
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the controller ended within 5 s of the stop")
            .unwrap();
    }
}
