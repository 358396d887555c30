//! The field reference of `docs/operator.md`, generated from the CRD's OpenAPI schema so the
//! documentation cannot drift from the types (a test compares them).
use kube::CustomResourceExt;
use serde_json::Value;

use crate::{EventConsumer, EventType};

pub const BEGIN: &str = "<!-- BEGIN GENERATED REFERENCE (highwater-operator reference) -->";
pub const END: &str = "<!-- END GENERATED REFERENCE -->";
pub const EVENT_TYPE_BEGIN: &str =
    "<!-- BEGIN GENERATED EVENTTYPE REFERENCE (highwater-operator reference eventtype) -->";
pub const EVENT_TYPE_END: &str = "<!-- END GENERATED EVENTTYPE REFERENCE -->";

/// A Markdown table: field, type, default, description, for `spec` and `status`.
pub fn reference_markdown() -> String {
    markdown(serde_json::to_value(EventConsumer::crd()).expect("the CRD serializes"))
}

/// The same table for the `EventType` resource.
pub fn event_type_reference_markdown() -> String {
    markdown(serde_json::to_value(EventType::crd()).expect("the CRD serializes"))
}

fn markdown(crd: Value) -> String {
    let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    let mut rows = Vec::new();
    for top in ["spec", "status"] {
        walk(&root[top], top, &mut rows);
    }
    let mut out = String::from("| field | type | default | description |\n|---|---|---|---|\n");
    for (path, ty, default, doc) in rows {
        out.push_str(&format!("| `{path}` | {ty} | {default} | {doc} |\n"));
    }
    out
}

fn walk(schema: &Value, path: &str, rows: &mut Vec<(String, String, String, String)>) {
    let Some(props) = schema["properties"].as_object() else { return };
    let required: Vec<&str> =
        schema["required"].as_array().map_or(vec![], |r| r.iter().filter_map(Value::as_str).collect());
    for (name, s) in props {
        let p = format!("{path}.{name}");
        let mut ty = s["type"].as_str().unwrap_or("").to_owned();
        if let Some(e) = s["enum"].as_array() {
            ty = e.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" \\| ");
        }
        if required.contains(&name.as_str()) {
            ty.push_str(" (required)");
        }
        let default = match &s["default"] {
            Value::Null => String::new(),
            Value::String(v) => format!("`{v}`"),
            v => format!("`{v}`"),
        };
        let mut doc = s["description"].as_str().unwrap_or("").replace('\n', " ").replace('|', "\\|");
        for key in ["minimum", "maximum", "pattern"] {
            if let Some(v) = s.get(key).filter(|v| !v.is_null()) {
                let shown = match (v.as_str(), v.as_f64()) {
                    (Some(text), _) => text.to_owned(),
                    (None, Some(n)) if n.fract() == 0.0 => format!("{}", n as i64),
                    _ => v.to_string(),
                };
                doc.push_str(&format!(" {key}: `{shown}`."));
            }
        }
        if let Some(rules) = s["x-kubernetes-validations"].as_array() {
            for r in rules {
                doc.push_str(&format!(" Rule: {}.", r["message"].as_str().unwrap_or("")));
            }
        }
        rows.push((p.clone(), ty, default, doc.trim().to_owned()));
        match s["type"].as_str() {
            Some("object") => walk(s, &p, rows),
            Some("array") => walk(&s["items"], &format!("{p}[]"), rows),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regenerate with `cargo run -p highwater-operator -- reference` and paste between the markers.
    #[test]
    fn operator_doc_reference_matches_the_crd() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operator.md"))
            .expect("docs/operator.md exists");
        let start = doc.find(BEGIN).expect("begin marker") + BEGIN.len();
        let end = doc.find(END).expect("end marker");
        assert_eq!(
            doc[start..end].trim(),
            reference_markdown().trim(),
            "docs/operator.md's reference is stale: run `cargo run -p highwater-operator -- reference` and paste it between the markers"
        );
    }

    /// Regenerate with `cargo run -p highwater-operator -- reference eventtype`.
    #[test]
    fn operator_doc_event_type_reference_matches_the_crd() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operator.md"))
            .expect("docs/operator.md exists");
        let start = doc.find(EVENT_TYPE_BEGIN).expect("begin marker") + EVENT_TYPE_BEGIN.len();
        let end = doc.find(EVENT_TYPE_END).expect("end marker");
        assert_eq!(
            doc[start..end].trim(),
            event_type_reference_markdown().trim(),
            "docs/operator.md's EventType reference is stale: run `cargo run -p highwater-operator -- reference eventtype` and paste it between its markers"
        );
    }
}
