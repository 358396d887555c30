//! The producer's client context: it keeps librdkafka's recent client-level errors (connection
//! refused, authentication failed, all brokers down, ...) so that a record that times out can say
//! why. Several, because the cause ("SASL authentication error") is often followed by its
//! consequence ("1/1 brokers are down").
use std::sync::{Arc, Mutex};

use rdkafka::{ClientContext, error::KafkaError};

/// Distinct client errors kept at most.
const KEPT: usize = 3;

/// Shared between the producer's context (which writes it) and the sink (which reads it).
#[derive(Clone, Default)]
pub struct LastError(Arc<Mutex<Vec<String>>>);

impl LastError {
    /// The recent distinct client errors since the last delivered batch, oldest first.
    pub fn recent(&self) -> Option<String> {
        let errors = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (!errors.is_empty()).then(|| errors.join("; "))
    }

    /// After a delivered batch: older errors explain nothing that follows.
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn push(&self, reason: &str) {
        let mut errors = self.0.lock().unwrap_or_else(|p| p.into_inner());
        errors.retain(|e| e != reason);
        errors.push(reason.to_owned());
        if errors.len() > KEPT {
            errors.remove(0);
        }
    }
}

pub struct Context(pub LastError);

impl ClientContext for Context {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(error = %error, reason, "kafka sink: client error");
        self.0.push(reason);
    }
}
