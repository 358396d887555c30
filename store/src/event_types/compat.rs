//! Compatibility of two JSON Schemas of the subset highwater enforces ([`super::SUPPORTED_KEYWORDS`]):
//! is every payload valid under the *writer* schema also valid under the *reader* schema?
//!
//! The `jsoncompat` crate (Rust, 0.5.0) was evaluated against this checker and not adopted: its
//! backward role accepts the open-content cases below by assuming writers never sent undeclared
//! properties, it explains one incompatible path rather than each, and it refuses `$schema`s other
//! than 2020-12 that highwater accepts (docs/events.md, "Why this checker", with the pair-by-pair
//! evidence). This is the subset
//! the registry needs, conservative: when it cannot prove that a writer's payload fits the reader,
//! it reports the path. Tested against a table of schema pairs (below).
//!
//! The **open content model** is the case that trips schema registries (Confluent #1458): a
//! writer schema without `additionalProperties: false` accepts any value under any property it
//! does not declare, so a reader that declares a new optional property `p` cannot be proven to
//! read every payload the writer accepted (one may hold `p` with another type). Such findings are
//! [`Finding::open_content`]: the registry does not refuse them blindly, it checks the stored
//! events of the older versions against the new schema instead (they are the payloads that exist)
//! and says so.
use serde_json::Value;

/// One reason a writer's payload may not fit the reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// JSON path in the schemas, `$.properties.total`.
    pub path: String,
    pub problem: String,
    /// True when the only reason is that the writer's content model is open (see the module).
    pub open_content: bool,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

/// Every finding of `writer` ⊄ `reader`; empty when every payload valid under `writer` is valid
/// under `reader`. `None` is the schema-less version (any JSON value).
pub fn check(writer: Option<&Value>, reader: Option<&Value>) -> Vec<Finding> {
    let any = Value::Bool(true);
    let mut out = Vec::new();
    subset(writer.unwrap_or(&any), reader.unwrap_or(&any), "$", &mut out);
    out
}

fn hard(out: &mut Vec<Finding>, path: &str, problem: String) {
    out.push(Finding { path: path.to_owned(), problem, open_content: false });
}

/// The schema accepts every value (`true`, `{}`, or only annotations).
fn accepts_all(s: &Value) -> bool {
    match s {
        Value::Bool(b) => *b,
        Value::Object(m) => m.keys().all(|k| {
            matches!(
                k.as_str(),
                "$schema"
                    | "$id"
                    | "$comment"
                    | "title"
                    | "description"
                    | "default"
                    | "examples"
                    | "deprecated"
                    | "readOnly"
                    | "writeOnly"
            )
        }),
        _ => false,
    }
}

const ALL_TYPES: &[&str] = &["object", "array", "string", "number", "integer", "boolean", "null"];

/// The JSON types a schema's `type` allows (every type when absent).
fn types(s: &Value) -> Vec<&str> {
    match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => ALL_TYPES.to_vec(),
    }
}

fn allows(types: &[&str], t: &str) -> bool {
    types.contains(&t) || (t == "integer" && types.contains(&"number"))
}

fn num(s: &Value, k: &str) -> Option<f64> {
    s.get(k).and_then(Value::as_f64)
}

/// The values an `enum`/`const` restricts the schema to, if it does.
fn values(s: &Value) -> Option<Vec<&Value>> {
    if let Some(c) = s.get("const") {
        return Some(vec![c]);
    }
    s.get("enum").and_then(Value::as_array).map(|a| a.iter().collect())
}

fn subset(w: &Value, r: &Value, path: &str, out: &mut Vec<Finding>) {
    if accepts_all(r) || w == r || *w == Value::Bool(false) {
        return;
    }
    if *r == Value::Bool(false) {
        hard(out, path, "the reader accepts no value here".into());
        return;
    }
    let empty = serde_json::Map::new();
    let wm = w.as_object().unwrap_or(&empty);
    let w_values = values(w);
    // A writer restricted to listed values: each must be valid under the reader, which the
    // database can answer exactly; here, a value-by-value check of the keywords that matter.
    if let Some(rv) = values(r) {
        match &w_values {
            Some(wv) => {
                let missing: Vec<String> = wv.iter().filter(|v| !rv.contains(v)).map(|v| v.to_string()).collect();
                if !missing.is_empty() {
                    hard(out, path, format!("the reader's enum does not list {}", missing.join(", ")));
                }
            }
            None => hard(out, path, "the reader restricts the values (enum/const), the writer does not".into()),
        }
    }
    let (wt, rt) = (types(w), types(r));
    let wt: Vec<&str> = match &w_values {
        // Types of the listed values only.
        Some(vals) => ALL_TYPES
            .iter()
            .copied()
            .filter(|t| vals.iter().any(|v| json_type(v) == *t || (*t == "number" && json_type(v) == "integer")))
            .filter(|t| allows(&wt, t))
            .collect(),
        None => wt,
    };
    let narrowed: Vec<&str> = wt.iter().copied().filter(|t| !allows(&rt, t)).collect();
    if !narrowed.is_empty() {
        hard(
            out,
            path,
            format!("the writer allows type {} that the reader does not ({})", narrowed.join(", "), rt.join(", ")),
        );
    }
    if w_values.is_some() {
        // Listed values: the per-type keywords below would be checked against the values
        // themselves; the registry's dry run over stored events covers them.
        return;
    }
    let has = |t: &str| wt.iter().any(|x| *x == t || (t == "number" && *x == "integer"));
    // Bounds the reader sets must be implied by the writer's.
    if has("number") || has("integer") {
        lower(wm, r, "minimum", "exclusiveMinimum", path, out);
        upper(wm, r, "maximum", "exclusiveMaximum", path, out);
    }
    if has("string") {
        at_least(w, r, "minLength", path, out);
        at_most(w, r, "maxLength", path, out);
        if let Some(p) = r.get("pattern")
            && w.get("pattern") != Some(p)
        {
            hard(out, &format!("{path}.pattern"), format!("the reader requires the pattern {p}, the writer does not"));
        }
    }
    if has("array") {
        at_least(w, r, "minItems", path, out);
        at_most(w, r, "maxItems", path, out);
        if let Some(ri) = r.get("items") {
            let wi = w.get("items").cloned().unwrap_or(Value::Bool(true));
            subset(&wi, ri, &format!("{path}.items"), out);
        }
    }
    if has("object") {
        object(w, r, path, out);
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn lower(w: &serde_json::Map<String, Value>, r: &Value, inc: &str, exc: &str, path: &str, out: &mut Vec<Finding>) {
    let (wi, we) = (w.get(inc).and_then(Value::as_f64), w.get(exc).and_then(Value::as_f64));
    if let Some(m) = num(r, inc)
        && !(wi.is_some_and(|x| x >= m) || we.is_some_and(|x| x >= m))
    {
        hard(out, &format!("{path}.{inc}"), format!("the reader requires at least {m}, the writer allows less"));
    }
    if let Some(m) = num(r, exc)
        && !(wi.is_some_and(|x| x > m) || we.is_some_and(|x| x >= m))
    {
        hard(
            out,
            &format!("{path}.{exc}"),
            format!("the reader requires more than {m}, the writer allows {m} or less"),
        );
    }
}

fn upper(w: &serde_json::Map<String, Value>, r: &Value, inc: &str, exc: &str, path: &str, out: &mut Vec<Finding>) {
    let (wi, we) = (w.get(inc).and_then(Value::as_f64), w.get(exc).and_then(Value::as_f64));
    if let Some(m) = num(r, inc)
        && !(wi.is_some_and(|x| x <= m) || we.is_some_and(|x| x <= m))
    {
        hard(out, &format!("{path}.{inc}"), format!("the reader allows at most {m}, the writer allows more"));
    }
    if let Some(m) = num(r, exc)
        && !(wi.is_some_and(|x| x < m) || we.is_some_and(|x| x <= m))
    {
        hard(
            out,
            &format!("{path}.{exc}"),
            format!("the reader requires less than {m}, the writer allows {m} or more"),
        );
    }
}

fn at_least(w: &Value, r: &Value, k: &str, path: &str, out: &mut Vec<Finding>) {
    if let Some(m) = num(r, k)
        && !num(w, k).is_some_and(|x| x >= m)
    {
        hard(out, &format!("{path}.{k}"), format!("the reader requires {k} {m}, the writer allows less"));
    }
}

fn at_most(w: &Value, r: &Value, k: &str, path: &str, out: &mut Vec<Finding>) {
    if let Some(m) = num(r, k)
        && !num(w, k).is_some_and(|x| x <= m)
    {
        hard(out, &format!("{path}.{k}"), format!("the reader allows {k} {m}, the writer allows more"));
    }
}

/// What the writer accepts under a property it does not declare: `additionalProperties`, or
/// any value (`true`) when absent.
fn additional(s: &Value) -> Value {
    s.get("additionalProperties").cloned().unwrap_or(Value::Bool(true))
}

fn object(w: &Value, r: &Value, path: &str, out: &mut Vec<Finding>) {
    at_least(w, r, "minProperties", path, out);
    at_most(w, r, "maxProperties", path, out);
    let empty = serde_json::Map::new();
    let wp = w.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let rp = r.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let names = |s: &Value| -> Vec<String> {
        s.get("required")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
    };
    let (wr, rr) = (names(w), names(r));
    for n in rr.iter().filter(|n| !wr.contains(n)) {
        hard(
            out,
            &format!("{path}.required.{n}"),
            format!("the reader requires property {n:?}, the writer does not (its payloads may lack it)"),
        );
    }
    let w_add = additional(w);
    let r_add = additional(r);
    for (name, rs) in rp {
        let p = format!("{path}.properties.{name}");
        match wp.get(name) {
            Some(ws) => subset(ws, rs, &p, out),
            None if w_add == Value::Bool(false) => {}
            None if w_add == Value::Bool(true) || accepts_all(&w_add) => {
                if !accepts_all(rs) {
                    out.push(Finding {
                        path: p,
                        problem: format!(
                            "the reader declares {name:?}, the writer does not and has an open content model \
                             (additionalProperties is not false): its payloads may hold {name:?} with any value"
                        ),
                        open_content: true,
                    });
                }
            }
            None => subset(&w_add, rs, &p, out),
        }
    }
    // Properties the writer declares that the reader does not: they fall to the reader's
    // additionalProperties.
    if !accepts_all(&r_add) {
        for (name, ws) in wp.iter().filter(|(n, _)| !rp.contains_key(*n)) {
            let p = format!("{path}.properties.{name}");
            if r_add == Value::Bool(false) {
                hard(
                    out,
                    &p,
                    format!("the writer allows property {name:?}, the reader's additionalProperties is false"),
                );
            } else {
                subset(ws, &r_add, &p, out);
            }
        }
        // And what the writer accepts beyond its declared properties.
        if w_add != Value::Bool(false) {
            if r_add == Value::Bool(false) {
                hard(
                    out,
                    &format!("{path}.additionalProperties"),
                    "the writer accepts undeclared properties, the reader's additionalProperties is false".into(),
                );
            } else {
                subset(&w_add, &r_add, &format!("{path}.additionalProperties"), out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(props: Value, required: &[&str], additional: Option<bool>) -> Value {
        let mut s = json!({"type": "object", "properties": props, "required": required});
        if let Some(a) = additional {
            s["additionalProperties"] = json!(a);
        }
        s
    }

    /// (name, writer, reader, expected: "ok" | "open" (only open-content findings) | a path that
    /// must be among the hard findings).
    pub(super) fn table() -> Vec<(&'static str, Value, Value, &'static str)> {
        let id = json!({"id": {"type": "string"}});
        let id_total = json!({"id": {"type": "string"}, "total": {"type": "number"}});
        vec![
            ("same schema", obj(id.clone(), &["id"], Some(false)), obj(id.clone(), &["id"], Some(false)), "ok"),
            (
                "added optional property, closed writer",
                obj(id.clone(), &["id"], Some(false)),
                obj(id_total.clone(), &["id"], Some(false)),
                "ok",
            ),
            (
                "added optional property, open writer (the trap)",
                obj(id.clone(), &["id"], Some(true)),
                obj(id_total.clone(), &["id"], Some(true)),
                "open",
            ),
            (
                "added optional property, writer without additionalProperties",
                obj(id.clone(), &["id"], None),
                obj(id_total.clone(), &["id"], None),
                "open",
            ),
            (
                "added required property",
                obj(id.clone(), &["id"], Some(false)),
                obj(id_total.clone(), &["id", "total"], Some(false)),
                "$.required.total",
            ),
            (
                "removed required (reader no longer requires)",
                obj(id_total.clone(), &["id", "total"], Some(false)),
                obj(id_total.clone(), &["id"], Some(false)),
                "ok",
            ),
            (
                "removed property, closed reader",
                obj(id_total.clone(), &["id"], Some(false)),
                obj(id.clone(), &["id"], Some(false)),
                "$.properties.total",
            ),
            (
                "removed property, open reader",
                obj(id_total.clone(), &["id"], Some(true)),
                obj(id.clone(), &["id"], Some(true)),
                "ok",
            ),
            (
                "open writer, closed reader",
                obj(id.clone(), &["id"], None),
                obj(id.clone(), &["id"], Some(false)),
                "$.additionalProperties",
            ),
            ("type widened integer to number", json!({"type": "integer"}), json!({"type": "number"}), "ok"),
            ("type narrowed number to integer", json!({"type": "number"}), json!({"type": "integer"}), "$"),
            ("type widened to a union", json!({"type": "string"}), json!({"type": ["string", "null"]}), "ok"),
            ("type changed", json!({"type": "string"}), json!({"type": "number"}), "$"),
            ("enum extended", json!({"enum": ["a", "b"]}), json!({"enum": ["a", "b", "c"]}), "ok"),
            ("enum reduced", json!({"enum": ["a", "b"]}), json!({"enum": ["a"]}), "$"),
            ("enum added", json!({"type": "string"}), json!({"type": "string", "enum": ["a"]}), "$"),
            ("const within enum", json!({"const": "a"}), json!({"enum": ["a", "b"]}), "ok"),
            (
                "minimum raised",
                json!({"type": "number", "minimum": 0}),
                json!({"type": "number", "minimum": 1}),
                "$.minimum",
            ),
            ("minimum lowered", json!({"type": "number", "minimum": 1}), json!({"type": "number", "minimum": 0}), "ok"),
            ("maximum added", json!({"type": "number"}), json!({"type": "number", "maximum": 10}), "$.maximum"),
            (
                "maxLength reduced",
                json!({"type": "string", "maxLength": 10}),
                json!({"type": "string", "maxLength": 5}),
                "$.maxLength",
            ),
            ("pattern added", json!({"type": "string"}), json!({"type": "string", "pattern": "^a"}), "$.pattern"),
            (
                "items narrowed",
                json!({"type": "array", "items": {"type": "number"}}),
                json!({"type": "array", "items": {"type": "integer"}}),
                "$.items",
            ),
            (
                "items widened",
                json!({"type": "array", "items": {"type": "integer"}}),
                json!({"type": "array", "items": {"type": "number"}}),
                "ok",
            ),
            (
                "nested property type narrowed",
                obj(json!({"line": obj(json!({"qty": {"type": "number"}}), &[], Some(false))}), &[], Some(false)),
                obj(json!({"line": obj(json!({"qty": {"type": "integer"}}), &[], Some(false))}), &[], Some(false)),
                "$.properties.line.properties.qty",
            ),
            ("schema-less writer, any reader schema", json!(true), json!({"type": "object"}), "$"),
            ("any writer, schema-less reader", json!({"type": "object"}), json!(true), "ok"),
        ]
    }

    #[test]
    fn the_table_of_schema_pairs() {
        for (name, w, r, expected) in table() {
            let f = check(Some(&w), Some(&r));
            match expected {
                "ok" => assert!(f.is_empty(), "{name}: expected compatible, got {f:?}"),
                "open" => assert!(
                    !f.is_empty() && f.iter().all(|x| x.open_content),
                    "{name}: expected only open-content findings, got {f:?}"
                ),
                path => assert!(
                    f.iter().any(|x| x.path == path && !x.open_content),
                    "{name}: expected a finding at {path}, got {f:?}"
                ),
            }
        }
    }

    #[test]
    fn none_is_the_schema_less_version() {
        assert!(check(None, None).is_empty());
        assert!(check(Some(&json!({"type": "object"})), None).is_empty());
        assert!(!check(None, Some(&json!({"type": "object"}))).is_empty());
    }
}
