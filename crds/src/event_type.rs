//! The `EventType` resource: an event type of the registry with its schema versions and
//! compatibility mode, declared in Git and reconciled by the operator.
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Condition;

pub const EVENT_TYPE_KIND: &str = "EventType";
/// The pattern of a registered event type name (the `event_types` table's CHECK).
pub const EVENT_TYPE_PATTERN: &str = r"^[A-Za-z][A-Za-z0-9_.:-]{0,199}$";
/// Versions one resource may declare (bounds the CEL rules' cost).
pub const MAX_VERSIONS: usize = 100;

/// What an `EventType` declares. The operator applies it to the registry as one transaction:
/// every version it lists is registered, or, when one is refused (incompatible with the versions
/// before it under `compatibility`, or different from the version the registry already holds),
/// nothing changes and the status says why.
// Clippy reads the printer columns' repeated `type_ = "string"` as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "highwater.dev",
    version = "v1alpha1",
    kind = "EventType",
    namespaced,
    shortname = "et",
    status = "EventTypeStatus",
    doc = "An event type of the highwater registry: its schema versions, upcasts, compatibility mode and aliases.",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.eventType"),
    printcolumn(name = "Latest", type_ = "integer", json_path = ".status.latestVersion"),
    printcolumn(name = "Events", type_ = "integer", json_path = ".status.totalEvents"),
    printcolumn(name = "By version", type_ = "string", json_path = ".status.eventsByVersion"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventTypeSpec {
    /// Name of the type in the registry, as events carry it (`OrderPlaced`). Required: a
    /// Kubernetes name is a lowercase DNS name and type names usually are not, and a registered
    /// type is never removed. Immutable.
    #[schemars(regex(pattern = r"^[A-Za-z][A-Za-z0-9_.:-]{0,199}$"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("eventType is immutable: stored events carry the name; declare the new name in another resource and list the old one in its aliases"))]
    pub event_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Which versions a new version's schema must be compatible with (as in schema registries):
    /// `Backward` (default: a consumer of the new version reads events of the version before),
    /// `Forward` (consumers of the version before read events of the new one), `Full` (both), their
    /// `Transitive` forms (against every earlier version, not only the one before), or `None`.
    #[serde(default)]
    pub compatibility: Compatibility,
    /// Every version of the type, `1, 2, 3, …` in order: a new version is appended to the list; a
    /// version the registry holds never changes.
    #[schemars(length(min = 1, max = 100), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"]))]
    #[x_kube(
        validation = Rule::new("self.map(v, v.version).isSorted() && self.all(v, v.version >= 1 && v.version <= self.size())")
            .message("versions must be 1, 2, 3, … in order, each once and none skipped")
    )]
    pub versions: Vec<VersionSpec>,
    /// Former names of the type: events stored under an alias are read as this type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = r"^[A-Za-z][A-Za-z0-9_.:-]{0,199}$")))]
    pub aliases: Vec<String>,
}

/// One schema version of an event type.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.upcast) || self.version > 1")
    .message("version 1 has no upcast: an upcast turns the version before into this one"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionSpec {
    #[schemars(range(min = 1))]
    pub version: i32,
    /// JSON Schema of the payload of this version (the subset `highwater.append` enforces, see
    /// docs/events.md); absent: any payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub schema: Option<serde_json::Value>,
    /// SQL expression over `payload` (the version before's) that yields this version's payload,
    /// applied on read for consumers of the latest version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upcast: Option<String>,
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true,
        "description": "JSON Schema of the payload of this version (the subset `highwater.append` enforces, see docs/events.md); absent: any payload."
    })
}

/// The compatibility mode of a type's versions.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compatibility {
    #[default]
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
    None,
}

/// What the operator reports on an `EventType`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EventTypeStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The latest version the registry holds (after a refusal: the one it held before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_version: Option<i32>,
    /// Stored events per registered version, refreshed periodically.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<VersionStatus>,
    /// Stored events of the type, all versions.
    #[serde(default)]
    pub total_events: i64,
    /// `v1=10 v2=3`: the `By version` column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_by_version: Option<String>,
    /// `Ready` (the spec is what the registry holds) and `Refused` (a version was refused, with the
    /// reason and the fix; the registry was left unchanged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One registered version and its stored events.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VersionStatus {
    pub version: i32,
    pub events: i64,
}

impl Compatibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Compatibility::Backward => "Backward",
            Compatibility::BackwardTransitive => "BackwardTransitive",
            Compatibility::Forward => "Forward",
            Compatibility::ForwardTransitive => "ForwardTransitive",
            Compatibility::Full => "Full",
            Compatibility::FullTransitive => "FullTransitive",
            Compatibility::None => "None",
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::json;

    use super::*;

    fn schema() -> serde_json::Value {
        let crd = serde_json::to_value(EventType::crd()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn defaults_and_round_trip() {
        let spec: EventTypeSpec = serde_json::from_value(json!({
            "eventType": "OrderPlaced",
            "versions": [{"version": 1, "schema": {"type": "object", "required": ["id"]}}]
        }))
        .unwrap();
        assert_eq!(spec.compatibility, Compatibility::Backward);
        assert!(spec.aliases.is_empty());
        assert_eq!(spec.versions[0].schema.as_ref().unwrap()["required"][0], "id");
        let back: EventTypeSpec = serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
        let unknown = serde_json::from_value::<EventTypeSpec>(json!({"eventType": "A", "versions": [], "x": 1}));
        assert!(unknown.is_err());
    }

    #[test]
    fn compatibility_serializes_as_its_name() {
        for c in [
            Compatibility::Backward,
            Compatibility::BackwardTransitive,
            Compatibility::Forward,
            Compatibility::ForwardTransitive,
            Compatibility::Full,
            Compatibility::FullTransitive,
            Compatibility::None,
        ] {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
    }

    #[test]
    fn the_schema_is_free_form_and_versions_are_a_map_list_with_rules() {
        let s = schema();
        let spec = &s["properties"]["spec"];
        assert_eq!(spec["required"], json!(["eventType", "versions"]));
        let versions = &spec["properties"]["versions"];
        assert_eq!(versions["x-kubernetes-list-type"], "map");
        assert_eq!(versions["x-kubernetes-list-map-keys"], json!(["version"]));
        assert_eq!(versions["maxItems"], MAX_VERSIONS);
        assert_eq!(versions["minItems"], 1);
        let rules = versions["x-kubernetes-validations"].to_string();
        assert!(rules.contains("isSorted()") && rules.contains("none skipped"), "{rules}");
        let item = &versions["items"];
        assert_eq!(item["properties"]["schema"]["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(item["properties"]["schema"]["type"], "object");
        assert!(item["x-kubernetes-validations"].to_string().contains("version 1 has no upcast"));
        let et = &spec["properties"]["eventType"];
        assert_eq!(et["pattern"], EVENT_TYPE_PATTERN);
        assert!(et["x-kubernetes-validations"].to_string().contains("eventType is immutable"));
        assert_eq!(spec["properties"]["aliases"]["items"]["pattern"], EVENT_TYPE_PATTERN);
        assert_eq!(spec["properties"]["compatibility"]["default"], "Backward");
    }

    #[test]
    fn printer_columns_and_names() {
        let crd = EventType::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("eventtypes.highwater.dev"));
        assert_eq!(crd.spec.names.short_names, Some(vec!["et".to_owned()]));
        assert_eq!(crd.spec.scope, "Namespaced");
        let cols: Vec<String> =
            crd.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.clone()).collect();
        assert_eq!(cols, ["Type", "Latest", "Events", "By version", "Ready", "Age"]);
        assert!(crd.spec.versions[0].subresources.as_ref().unwrap().status.is_some());
    }
}
