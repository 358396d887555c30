//! The producer's client context: it keeps librdkafka's latest client-level error (connection
//! refused, authentication failed, ...) so that a record that times out can say why.
use std::sync::{Arc, Mutex};

use rdkafka::{ClientContext, error::KafkaError};

/// Shared between the producer's context (which writes it) and the sink (which reads it).
#[derive(Clone, Default)]
pub struct LastError(Arc<Mutex<Option<String>>>);

impl LastError {
    /// The latest client error, taken: each one explains at most the failure that follows it.
    pub fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

pub struct Context(pub LastError);

impl ClientContext for Context {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(error = %error, reason, "kafka sink: client error");
        *self.0.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_owned());
    }
}
