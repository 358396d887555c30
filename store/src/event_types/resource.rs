//! `EventType` documents (the operator's resource, crds/eventtype.yaml) read outside Kubernetes:
//! the one conversion from a resource's spec to the registry's [`TypeSpec`], shared by the
//! operator and `highwater event-types apply -f`, so a type declared in Git registers the same
//! way with or without a cluster.
use highwater_crds::{API_VERSION, Compatibility as Mode, EVENT_TYPE_KIND, EventTypeSpec, KIND, MAX_VERSIONS};
use serde::Deserialize;

use super::{Compatibility, TypeSpec, VersionSpec};
use crate::{
    Error, Result,
    yaml_numbers::{Field, take_bad},
};

impl From<&EventTypeSpec> for TypeSpec {
    fn from(spec: &EventTypeSpec) -> Self {
        TypeSpec {
            event_type: spec.event_type.clone(),
            description: spec.description.clone(),
            compatibility: match spec.compatibility {
                Mode::Backward => Compatibility::Backward,
                Mode::BackwardTransitive => Compatibility::BackwardTransitive,
                Mode::Forward => Compatibility::Forward,
                Mode::ForwardTransitive => Compatibility::ForwardTransitive,
                Mode::Full => Compatibility::Full,
                Mode::FullTransitive => Compatibility::FullTransitive,
                Mode::None => Compatibility::None,
            },
            versions: spec
                .versions
                .iter()
                .map(|v| VersionSpec { version: v.version, schema: v.schema.clone(), upcast: v.upcast.clone() })
                .collect(),
            aliases: spec.aliases.clone(),
        }
    }
}

/// An `EventType` document of a file: where it is (for messages) and its spec.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeDocument {
    pub origin: String,
    pub spec: EventTypeSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    spec: EventTypeSpec,
}

/// The `EventType` documents of a (multi-document) YAML file. `EventConsumer` documents beside
/// them (one GitOps folder) are passed over and counted; any other kind is refused, as is a spec
/// with an unknown field, naming the document.
pub fn parse_documents(text: &str, source: &str) -> Result<(Vec<TypeDocument>, usize)> {
    let (mut types, mut consumers) = (Vec::new(), 0);
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let origin = format!("{source} (document {})", i + 1);
        let bad = |problem: String, fix: &str| Error::refused(format!("{origin}: {problem}")).with_fix(fix.to_owned());
        let Some(mut value) = Option::<serde_yaml::Value>::deserialize(doc).map_err(|e| {
            bad(e.to_string(), "correct the YAML at the line and column named (it is parsed as a whole file)")
        })?
        else {
            continue;
        };
        let field = |k: &str| value.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        if api_version == API_VERSION && kind == KIND {
            consumers += 1;
            continue;
        }
        if api_version != API_VERSION || kind != EVENT_TYPE_KIND {
            return Err(bad(
                format!(
                    "expected apiVersion: {API_VERSION} and kind: {EVENT_TYPE_KIND}, found {api_version:?} {kind:?}"
                ),
                "give the document apiVersion: highwater.dev/v1alpha1 and kind: EventType (crds/eventtype.yaml)",
            ));
        }
        // A version number that is no whole number in range is named with its path, and taken out
        // so that the typed parse reports the document's other problems with it.
        let numbers = value.get_mut("spec").map(version_numbers).unwrap_or_default();
        let d: Document = match serde_yaml::from_value(value) {
            Ok(d) if numbers.is_empty() => d,
            parsed => {
                let mut problems: Vec<String> = numbers.iter().map(|p| format!("spec.{p}")).collect();
                let fix = match parsed {
                    Err(e) => {
                        problems.push(format!("spec: {e}"));
                        "see docs/operator.md, \"EventType\", for the fields (`highwater-operator reference eventtype`)"
                    }
                    Ok(_) => "number the versions 1, 2, 3, … in order, each once",
                };
                return Err(bad(problems.join("; "), fix));
            }
        };
        types.push(TypeDocument { origin, spec: d.spec });
    }
    Ok((types, consumers))
}

/// The problems of `versions[].version` (see yaml_numbers.rs).
fn version_numbers(spec: &mut serde_yaml::Value) -> Vec<String> {
    let problem = |path: &str, shown: &str, integer: bool| {
        let what = if integer { "is out of range" } else { "is not a whole number" };
        format!("{path}: {shown} {what}: write the version's number, from 1 to {MAX_VERSIONS}")
    };
    let field = Field { path: "versions[].version", min: 1, max: MAX_VERSIONS as u64, problem: &problem };
    take_bad(spec, &[field])
}

#[cfg(test)]
mod tests {
    use super::*;

    const ET: &str = "apiVersion: highwater.dev/v1alpha1\nkind: EventType\nmetadata: {name: placed}\nspec:\n  eventType: OrderPlaced\n  compatibility: FullTransitive\n  aliases: [OrderCreated]\n  versions:\n    - {version: 1, schema: {type: object}}\n    - {version: 2, upcast: \"payload || '{}'\"}\n";

    #[test]
    fn a_resource_becomes_the_registry_spec_field_by_field() {
        let (docs, consumers) = parse_documents(ET, "f.yaml").unwrap();
        assert_eq!(consumers, 0);
        let spec = TypeSpec::from(&docs[0].spec);
        assert_eq!(spec.event_type, "OrderPlaced");
        assert_eq!(spec.compatibility, Compatibility::FullTransitive);
        assert_eq!(spec.aliases, vec!["OrderCreated".to_owned()]);
        assert_eq!(spec.versions.len(), 2);
        assert_eq!(spec.versions[0].schema, Some(serde_json::json!({"type": "object"})));
        assert_eq!(spec.versions[1].upcast.as_deref(), Some("payload || '{}'"));
        assert_eq!(docs[0].origin, "f.yaml (document 1)");
    }

    #[test]
    fn every_mode_maps_to_the_store_s() {
        for (mode, stored) in [
            (Mode::Backward, "backward"),
            (Mode::BackwardTransitive, "backward_transitive"),
            (Mode::Forward, "forward"),
            (Mode::ForwardTransitive, "forward_transitive"),
            (Mode::Full, "full"),
            (Mode::FullTransitive, "full_transitive"),
            (Mode::None, "none"),
        ] {
            let spec = EventTypeSpec {
                event_type: "A".into(),
                description: None,
                compatibility: mode,
                versions: vec![highwater_crds::VersionSpec { version: 1, schema: None, upcast: None }],
                aliases: vec![],
            };
            assert_eq!(TypeSpec::from(&spec).compatibility.as_str(), stored);
            // The store parses the CRD's names as well.
            assert_eq!(mode.as_str().parse::<Compatibility>().unwrap().as_str(), stored);
        }
    }

    #[test]
    fn consumers_beside_types_are_counted_and_other_kinds_refused_by_document() {
        let consumer = "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {name: c}\nspec: {}\n";
        let (docs, consumers) = parse_documents(&format!("{consumer}---\n{ET}"), "f").unwrap();
        assert_eq!((docs.len(), consumers), (1, 1));
        assert_eq!(docs[0].origin, "f (document 2)");

        let e = parse_documents(&format!("{ET}---\napiVersion: v1\nkind: ConfigMap\n"), "f").unwrap_err().to_string();
        assert!(e.contains("f (document 2)") && e.contains("\"ConfigMap\"") && e.contains("fix:"), "{e}");

        let e = parse_documents(&ET.replace("aliases", "alias"), "f").unwrap_err().to_string();
        assert!(e.contains("f (document 1): spec:") && e.contains("unknown field `alias`"), "{e}");
    }
}
