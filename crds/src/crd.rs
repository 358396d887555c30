//! The CustomResourceDefinitions as YAML: printed by `highwater-operator crd` (and `crd
//! eventtype`), committed as `crds/eventconsumer.yaml` and `crds/eventtype.yaml`, and checked
//! against the types by a test.
use kube::CustomResourceExt;

use crate::{EventConsumer, EventType};

pub fn crd_yaml() -> String {
    let header = "# Generated from the Rust types in crds/src by `highwater-operator crd`; do not edit.\n";
    format!("{header}{}", serde_yaml::to_string(&EventConsumer::crd()).expect("the CRD serializes"))
}

/// The `EventType` CRD, `crds/eventtype.yaml`.
pub fn event_type_crd_yaml() -> String {
    let header = "# Generated from the Rust types in crds/src by `highwater-operator crd eventtype`; do not edit.\n";
    format!("{header}{}", serde_yaml::to_string(&EventType::crd()).expect("the CRD serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regenerate with `cargo run -p highwater-operator -- crd > crds/eventconsumer.yaml`.
    #[test]
    fn committed_crd_matches_the_types() {
        let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/eventconsumer.yaml"))
            .expect("crds/eventconsumer.yaml exists");
        assert!(
            committed == crd_yaml(),
            "crds/eventconsumer.yaml is stale: run `cargo run -p highwater-operator -- crd > crds/eventconsumer.yaml`"
        );
    }

    /// Regenerate with `cargo run -p highwater-operator -- crd eventtype > crds/eventtype.yaml`.
    #[test]
    fn committed_event_type_crd_matches_the_types() {
        let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/eventtype.yaml"))
            .expect("crds/eventtype.yaml exists");
        assert!(
            committed == event_type_crd_yaml(),
            "crds/eventtype.yaml is stale: run `cargo run -p highwater-operator -- crd eventtype > crds/eventtype.yaml`"
        );
    }

    #[test]
    fn the_event_type_crd_carries_the_cel_rules_and_columns() {
        let y = event_type_crd_yaml();
        for needle in [
            "x-kubernetes-validations",
            "eventType is immutable",
            "none skipped",
            "version 1 has no upcast",
            "x-kubernetes-preserve-unknown-fields: true",
            "x-kubernetes-list-type: map",
            "shortNames:\n    - et",
            "jsonPath: .status.latestVersion",
            "jsonPath: .status.totalEvents",
        ] {
            assert!(y.contains(needle), "missing {needle:?}");
        }
    }

    #[test]
    fn the_crd_carries_the_cel_rules_and_columns() {
        let y = crd_yaml();
        for needle in [
            "x-kubernetes-validations",
            "set exactly one sink",
            "sink.sse needs delivery: PerInstance",
            "delivery is immutable",
            "consumerName is immutable",
            "shortNames:\n    - ec",
            "jsonPath: .status.totalLag",
        ] {
            assert!(y.contains(needle), "missing {needle:?}");
        }
    }
}
