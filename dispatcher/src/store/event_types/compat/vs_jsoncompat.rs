//! compat.rs against the `jsoncompat` crate (0.5.0, a dev-dependency only): an independent prover
//! used as an oracle for ours, and the evidence for keeping ours instead of depending on it
//! (docs/events.md, "Why this checker"). If a jsoncompat upgrade changes a verdict pinned here,
//! the decision is worth revisiting.
//!
//! Direction names: jsoncompat's `check_compat(old, new, Role::Serializer)` proves `new ⊆ old`
//! under full validation semantics, so `check_compat(reader, writer, Serializer)` is exactly our
//! `check(writer, reader)` question. Its `Role::Deserializer` (its backward mode) is not: it assumes
//! old writers never sent a property they did not declare, which is the open-content trap.
use super::tests::table;
use super::*;
use jsoncompat::{Role, SchemaDocument, check_compat, explain_compat_failure};
use serde_json::json;

fn doc(s: &Value) -> SchemaDocument {
    SchemaDocument::from_json(s).expect("a schema jsoncompat parses")
}

/// `writer ⊆ reader` proved by jsoncompat, without its deserializer assumption.
fn strict(writer: &Value, reader: &Value) -> bool {
    check_compat(&doc(reader), &doc(writer), Role::Serializer).expect("jsoncompat runs on the table")
}

fn open(props: Value, additional: Option<Value>) -> Value {
    let mut s = json!({"type": "object", "properties": props});
    if let Some(a) = additional {
        s["additionalProperties"] = a;
    }
    s
}

/// The open-content cases beyond compat.rs's table (name, writer, reader).
fn trap_cases() -> Vec<(&'static str, Value, Value)> {
    vec![
        (
            "added optional property accepting any value",
            open(json!({"id": {"type": "string"}}), None),
            open(json!({"id": {"type": "string"}, "note": {}}), None),
        ),
        (
            "writer's additionalProperties is a schema the added property does not fit",
            open(json!({"id": {"type": "string"}}), Some(json!({"type": "string"}))),
            open(json!({"id": {"type": "string"}, "total": {"type": "number"}}), Some(json!({"type": "string"}))),
        ),
        (
            "added optional property in an open nested object",
            open(json!({"line": open(json!({}), None)}), Some(json!(false))),
            open(json!({"line": open(json!({"qty": {"type": "integer"}}), None)}), Some(json!(false))),
        ),
    ]
}

/// Every pair, in both directions (backward asks `check(old, new)`, forward `check(new, old)`):
/// compat.rs finds nothing exactly when jsoncompat proves inclusion. Neither is then more
/// permissive than the other on these pairs; where ours is conservative (a widened pattern),
/// jsoncompat cannot prove inclusion either.
#[test]
fn ours_finds_nothing_exactly_where_jsoncompat_proves_inclusion() {
    let pairs = table().into_iter().map(|(n, w, r, _)| (n, w, r)).chain(trap_cases()).chain([(
        "pattern widened",
        json!({"type": "string", "pattern": "^ab"}),
        json!({"type": "string", "pattern": "^a"}),
    )]);
    for (name, a, b) in pairs {
        for (dir, w, r) in [("backward", &a, &b), ("forward", &b, &a)] {
            let ours = check(Some(w), Some(r));
            assert_eq!(ours.is_empty(), strict(w, r), "{name} ({dir}): compat.rs found {ours:?}");
        }
    }
}

/// jsoncompat's own backward role accepts the open-content cases that a payload the old schema
/// accepted disproves; compat.rs reports them (as open-content findings, checked against the
/// stored events, or as hard ones when the writer's additionalProperties rules the value out).
#[test]
fn its_deserializer_role_falls_into_the_open_content_trap() {
    let table_traps = table().into_iter().filter(|(_, _, _, e)| *e == "open").map(|(n, w, r, _)| (n, w, r));
    let payloads = [json!({"id": "a", "total": "10%"}), json!({"id": "a", "total": "x"})];
    let mut seen = 0;
    for (name, old, new) in table_traps.chain(trap_cases().into_iter().skip(1).take(1)) {
        assert!(check_compat(&doc(&old), &doc(&new), Role::Deserializer).unwrap(), "{name}: jsoncompat accepts");
        assert!(!check(Some(&old), Some(&new)).is_empty(), "{name}: compat.rs reports it");
        // A payload the old version accepted that the new one refuses: the acceptance is an
        // assumption about the writers, not a fact about the stored events.
        assert!(
            payloads.iter().any(|p| doc(&old).is_valid(p).unwrap() && !doc(&new).is_valid(p).unwrap()),
            "{name}: a stored payload disproves it"
        );
        seen += 1;
    }
    assert_eq!(seen, 3);
}

/// A refusal must name every incompatible path; jsoncompat explains the first one it meets.
#[test]
fn it_explains_one_path_where_ours_names_each() {
    let old = json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}});
    let new = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}});
    let paths: Vec<String> = check(Some(&old), Some(&new)).into_iter().map(|f| f.path).collect();
    assert_eq!(paths, ["$.properties.a", "$.properties.b"]);
    let explained = explain_compat_failure(&doc(&old), &doc(&new), Role::Deserializer).unwrap().unwrap();
    let named = ["#/properties/a", "#/properties/b"].iter().filter(|p| explained.contains(*p)).count();
    assert_eq!(named, 1, "{explained}");
}

/// highwater accepts schemas under older drafts (docs/events.md, "Payload schemas");
/// jsoncompat 0.5.0 refuses any `$schema` but 2020-12 and the OpenAPI 3.1 dialect.
#[test]
fn it_refuses_a_draft_07_schema_highwater_accepts() {
    let s = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"});
    assert!(check(Some(&s), Some(&s)).is_empty());
    let refused = SchemaDocument::from_json(&s)
        .map_err(|e| e.to_string())
        .and_then(|d| check_compat(&d, &d, Role::Both).map_err(|e| e.to_string()));
    assert!(refused.as_ref().is_err_and(|e| e.contains("unsupported $schema")), "{refused:?}");
}
