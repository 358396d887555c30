//! The current definition of every function, trigger and view (migrations/definitions/), in the
//! order they are applied: a function before the SQL-language functions and triggers that use it.
pub const DEFINITIONS: &[(&str, &str)] = &[
    ("json_schema_error", include_str!("../../../../migrations/definitions/json_schema_error.sql")),
    ("json_schema_check", include_str!("../../../../migrations/definitions/json_schema_check.sql")),
    ("token", include_str!("../../../../migrations/definitions/token.sql")),
    ("append", include_str!("../../../../migrations/definitions/append.sql")),
    ("append_position", include_str!("../../../../migrations/definitions/append_position.sql")),
    ("stream_partition", include_str!("../../../../migrations/definitions/stream_partition.sql")),
    ("partition_instance", include_str!("../../../../migrations/definitions/partition_instance.sql")),
    ("is_shared_shard", include_str!("../../../../migrations/definitions/is_shared_shard.sql")),
    ("applied_bound", include_str!("../../../../migrations/definitions/applied_bound.sql")),
    ("applied", include_str!("../../../../migrations/definitions/applied.sql")),
    ("events_after", include_str!("../../../../migrations/definitions/events_after.sql")),
    ("shard_events_after", include_str!("../../../../migrations/definitions/shard_events_after.sql")),
    ("repartition", include_str!("../../../../migrations/definitions/repartition.sql")),
    ("create_event_partitions", include_str!("../../../../migrations/definitions/create_event_partitions.sql")),
    ("sql_sink_name", include_str!("../../../../migrations/definitions/sql_sink_name.sql")),
    ("sql_sink_prepare", include_str!("../../../../migrations/definitions/sql_sink_prepare.sql")),
    ("sql_sink_apply", include_str!("../../../../migrations/definitions/sql_sink_apply.sql")),
    ("sql_sink_refused", include_str!("../../../../migrations/definitions/sql_sink_refused.sql")),
    ("notify_events", include_str!("../../../../migrations/definitions/notify_events.sql")),
    ("advance_stream_version", include_str!("../../../../migrations/definitions/advance_stream_version.sql")),
    ("remember_raised_tx_id", include_str!("../../../../migrations/definitions/remember_raised_tx_id.sql")),
    ("record_pruned", include_str!("../../../../migrations/definitions/record_pruned.sql")),
    ("notify_applied", include_str!("../../../../migrations/definitions/notify_applied.sql")),
    ("dead_letter_parked_again", include_str!("../../../../migrations/definitions/dead_letter_parked_again.sql")),
    ("trigger_events_notify", include_str!("../../../../migrations/definitions/trigger_events_notify.sql")),
    (
        "trigger_events_advance_stream_version",
        include_str!("../../../../migrations/definitions/trigger_events_advance_stream_version.sql"),
    ),
    (
        "trigger_events_remember_raised_tx_id",
        include_str!("../../../../migrations/definitions/trigger_events_remember_raised_tx_id.sql"),
    ),
    (
        "trigger_events_record_pruned",
        include_str!("../../../../migrations/definitions/trigger_events_record_pruned.sql"),
    ),
    (
        "trigger_consumer_shards_notify_applied_update",
        include_str!("../../../../migrations/definitions/trigger_consumer_shards_notify_applied_update.sql"),
    ),
    (
        "trigger_consumer_shards_notify_applied_insert",
        include_str!("../../../../migrations/definitions/trigger_consumer_shards_notify_applied_insert.sql"),
    ),
    (
        "trigger_dead_letters_parked_again",
        include_str!("../../../../migrations/definitions/trigger_dead_letters_parked_again.sql"),
    ),
];
