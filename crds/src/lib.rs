//! API types shared by everything that reads consumer definitions: the YAML files of the CLI,
//! the dispatcher, the `EventConsumer` custom resource of the operator, and the `EventType`
//! resource the operator reconciles into the event type registry.
#![forbid(unsafe_code)]

mod crd;
mod event_type;
mod reference;
mod spec;
mod status;
mod validate;
mod validate_brokers;

pub use crd::{crd_yaml, event_type_crd_yaml};
pub use event_type::*;
pub use reference::{
    BEGIN as REFERENCE_BEGIN, END as REFERENCE_END, EVENT_TYPE_BEGIN as EVENT_TYPE_REFERENCE_BEGIN,
    EVENT_TYPE_END as EVENT_TYPE_REFERENCE_END, event_type_reference_markdown, reference_markdown,
};
pub use spec::*;
pub use status::*;
pub use validate::{
    BROKER_HEADERS, CONSUMER_NUMBERS, KAFKA_TOPIC_FIELDS, MAX_BATCH_SIZE, MAX_MAX_ATTEMPTS, MAX_PARTITIONS,
    MAX_SQL_TIMEOUT, MAX_SSE_BUFFER, NATS_SUBJECT_FIELDS, NumberField, RESERVED_KAFKA_PROPERTIES,
    RESERVED_WEBHOOK_HEADERS, SpecError, check_template, sql_timeout_too_long, validate_consumer_name,
};

/// API group and version of the `EventConsumer` resource; YAML files use the same header.
pub const API_VERSION: &str = "highwater.dev/v1alpha1";
pub const KIND: &str = "EventConsumer";
/// Instance id of the one cursor row of a shared consumer. Refused as a dispatcher instance id.
pub const SHARED_INSTANCE: &str = "__shared__";

/// Instance id of partition `index` (0-based) of a Shared consumer split in `count` partitions:
/// `__shared__/p3of8`; [`SHARED_INSTANCE`] when there is one. The database's
/// `highwater.partition_instance` writes the same.
pub fn partition_instance(index: u32, count: u32) -> String {
    if count <= 1 { SHARED_INSTANCE.to_owned() } else { format!("{SHARED_INSTANCE}/p{index}of{count}") }
}

/// Whether `instance` names a shard of a Shared consumer (one of its partitions, or its one
/// shard), as opposed to a dispatcher instance of a PerInstance consumer.
pub fn is_shared_instance(instance: &str) -> bool {
    instance == SHARED_INSTANCE || instance.starts_with(concat!("__shared__", "/"))
}

/// `(index, count)` of a partition instance id; `None` for anything else.
pub fn parse_partition_instance(instance: &str) -> Option<(u32, u32)> {
    let rest = instance.strip_prefix(SHARED_INSTANCE)?.strip_prefix("/p")?;
    let (i, n) = rest.split_once("of")?;
    let (i, n) = (i.parse().ok()?, n.parse().ok()?);
    (i < n && n > 1 && partition_instance(i, n) == instance).then_some((i, n))
}

#[cfg(test)]
mod partition_tests {
    use super::*;

    #[test]
    fn partition_instances_round_trip() {
        assert_eq!(partition_instance(0, 1), SHARED_INSTANCE);
        assert_eq!(partition_instance(3, 8), "__shared__/p3of8");
        assert_eq!(parse_partition_instance("__shared__/p3of8"), Some((3, 8)));
        for bad in ["__shared__", "__shared__/p8of8", "__shared__/p03of8", "__shared__/p1of1", "pod-1", "__shared__/x"]
        {
            assert_eq!(parse_partition_instance(bad), None, "{bad}");
        }
        assert!(is_shared_instance("__shared__") && is_shared_instance("__shared__/p0of2"));
        assert!(!is_shared_instance("dispatcher-0") && !is_shared_instance("__shared__x"));
    }
}
