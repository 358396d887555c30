use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the operator reports on an `EventConsumer`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EventConsumerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Degraded` (a shard is dead or failing), `Suspended`, `Conflict` (another
    /// resource claims the consumer name) or `Pending` (no shard yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
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
}

/// One cursor row.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShardState {
    /// `__shared__` or the dispatcher pod's name.
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
