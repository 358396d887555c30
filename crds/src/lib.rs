//! API types shared by everything that reads consumer definitions: the YAML files of the CLI,
//! the dispatcher, and (later) the `EventConsumer` custom resource of the operator.
#![forbid(unsafe_code)]

mod crd;
mod reference;
mod spec;
mod status;
mod validate;
mod validate_brokers;

pub use crd::crd_yaml;
pub use reference::{BEGIN as REFERENCE_BEGIN, END as REFERENCE_END, reference_markdown};
pub use spec::*;
pub use status::*;
pub use validate::{
    BROKER_HEADERS, KAFKA_TOPIC_FIELDS, MAX_BATCH_SIZE, MAX_MAX_ATTEMPTS, NATS_SUBJECT_FIELDS,
    RESERVED_KAFKA_PROPERTIES, RESERVED_WEBHOOK_HEADERS, SpecError, check_template, validate_consumer_name,
};

/// API group and version of the `EventConsumer` resource; YAML files use the same header.
pub const API_VERSION: &str = "highwater.dev/v1alpha1";
pub const KIND: &str = "EventConsumer";
/// Instance id of the one cursor row of a shared consumer. Refused as a dispatcher instance id.
pub const SHARED_INSTANCE: &str = "__shared__";
