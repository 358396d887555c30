use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the operator reports on an `EventConsumer`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EventConsumerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Degraded` (a shard is dead, retrying an event, or idle with an
    /// error no event caused), `Suspended`, `Conflict` (another
    /// resource claims the consumer name), `InvalidSpec` (the spec was refused) or `Pending` (no
    /// shard yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ConsumerState>,
    /// The consumer's name in the database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_name: Option<String>,
    /// Events not yet delivered, summed over the shards.
    #[serde(default)]
    pub total_lag: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardState>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The last `highwater.dev/restart` annotation value acted on (each new value restarts once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_restart: Option<String>,
    /// The last `highwater.dev/skip-event` annotation value acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_skip: Option<String>,
    /// A partitioned Shared consumer: partitions with events waiting, of all
    /// (`3/8 busy`: 3 of 8 partitions busy, the `Partitions` column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<String>,
    /// A rebuild in progress: done/total, rate and ETA (the `Rebuild` column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<String>,
    /// The last `highwater.dev/rebuild` annotation value acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_rebuild: Option<String>,
    /// The last `highwater.dev/redrive` annotation value acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_redrive: Option<String>,
    /// The last `highwater.dev/discard` annotation value acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_discard: Option<String>,
    /// The last `highwater.dev/replay` annotation value acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_replay: Option<String>,
}

/// One cursor row.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShardState {
    /// `__shared__`, a partition `__shared__/p<i>of<n>`, or the dispatcher pod's name.
    pub instance: String,
    /// `idle`, `processing`, `dead` or `disabled`.
    pub status: String,
    /// Id of the last event the cursor passed.
    pub cursor: i64,
    pub lag: i64,
    pub attempts: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_event_id: Option<i64>,
    /// A rebuild in progress (or just finished), as `highwater consumer status` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<RebuildState>,
}

/// Progress of a rebuild: events replayed of those that existed when it started.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RebuildState {
    pub done: i64,
    pub total: i64,
    /// Events per second since the rebuild started.
    pub rate: f64,
    /// Seconds left at that rate (absent when nothing was replayed yet, 0 when complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<f64>,
    pub complete: bool,
}

/// A Kubernetes-style condition (`Ready`, `Degraded`, `Suspended`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    #[serde(default)]
    pub message: String,
    /// RFC 3339 time of the last change of `status`.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The one-word state of an `EventConsumer` (`status.state`, the `Status` column).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumerState {
    Ready,
    Degraded,
    Suspended,
    Conflict,
    InvalidSpec,
    Pending,
}

impl ConsumerState {
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumerState::Ready => "Ready",
            ConsumerState::Degraded => "Degraded",
            ConsumerState::Suspended => "Suspended",
            ConsumerState::Conflict => "Conflict",
            ConsumerState::InvalidSpec => "InvalidSpec",
            ConsumerState::Pending => "Pending",
        }
    }
}

/// Why a spec could not be applied; it is also the state, the `Ready` condition's reason and the
/// Warning event's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The spec fails validation or the store refused it (unknown event types…).
    InvalidSpec,
    /// Another declaration owns the consumer name.
    Conflict,
}

impl Problem {
    pub fn as_str(self) -> &'static str {
        self.state().as_str()
    }

    pub fn state(self) -> ConsumerState {
        match self {
            Problem::InvalidSpec => ConsumerState::InvalidSpec,
            Problem::Conflict => ConsumerState::Conflict,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_serialize_as_their_names() {
        for s in [
            ConsumerState::Ready,
            ConsumerState::Degraded,
            ConsumerState::Suspended,
            ConsumerState::Conflict,
            ConsumerState::InvalidSpec,
            ConsumerState::Pending,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
