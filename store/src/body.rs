//! An event's payload or metadata as the JSON text PostgreSQL returned, never parsed into a tree.
//!
//! Sinks pass bodies through unchanged (an envelope, a record value, an SSE frame), so building a
//! `serde_json::Value` per event only to write it back out was the no-op drain's largest cost
//! (docs/bench/history.md). Decoding still validates the text; reading a field parses on demand.
use serde::Serialize;
use serde_json::{Value, value::RawValue};

/// Valid JSON text, serialised as itself by `serde_json` (never re-escaped).
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct Body(Box<RawValue>);

impl Body {
    /// Text already validated by its parser (as `sqlx` does when decoding `jsonb`).
    pub(crate) fn from_raw(raw: Box<RawValue>) -> Self {
        Body(raw)
    }

    /// The JSON text, as PostgreSQL wrote it (`jsonb` normalises spacing and key order).
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The body as a tree, for callers that inspect it.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.get()).expect("a Body holds valid JSON")
    }

    /// The top-level string field `key` of an object body; `None` when the body is not an
    /// object, the field is absent, or it is not a string.
    pub fn str_field(&self, key: &str) -> Option<String> {
        let [value] = self.str_fields([key]);
        value
    }

    /// [`Body::str_field`] for several keys, parsing the body once.
    pub fn str_fields<const N: usize>(&self, keys: [&str; N]) -> [Option<String>; N] {
        // Owned keys: a borrowed key would fail on any key written with an escape.
        let fields: Option<std::collections::HashMap<String, &RawValue>> = serde_json::from_str(self.get()).ok();
        keys.map(|key| serde_json::from_str(fields.as_ref()?.get(key)?.get()).ok())
    }
}

impl From<&Value> for Body {
    fn from(v: &Value) -> Self {
        Body(serde_json::value::to_raw_value(v).expect("a serde_json::Value always serialises"))
    }
}

impl From<Value> for Body {
    fn from(v: Value) -> Self {
        Body::from(&v)
    }
}

/// Equal when the texts are: bodies read from `jsonb` are normalised, so equal values have equal
/// text.
impl PartialEq for Body {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn serialises_as_the_json_it_holds() {
        let b = Body::from(json!({"note": "a \"quoted\" line\n", "n": 1}));
        #[derive(Serialize)]
        struct Wrap<'a> {
            payload: &'a Body,
        }
        let out = serde_json::to_string(&Wrap { payload: &b }).unwrap();
        assert_eq!(out, format!("{{\"payload\":{}}}", b.get()));
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["payload"], json!({"note": "a \"quoted\" line\n", "n": 1}));
        assert_eq!(b.to_value(), json!({"note": "a \"quoted\" line\n", "n": 1}));
    }

    #[test]
    fn reads_string_fields_only() {
        let b = Body::from(json!({"correlation_id": "c-1", "n": 2, "escaped": "a\"b"}));
        assert_eq!(b.str_field("correlation_id").as_deref(), Some("c-1"));
        assert_eq!(b.str_field("escaped").as_deref(), Some("a\"b"));
        assert_eq!(b.str_field("n"), None);
        assert_eq!(b.str_field("absent"), None);
        assert_eq!(b.str_fields(["n", "escaped", "correlation_id"]), [None, Some("a\"b".into()), Some("c-1".into())]);
        assert_eq!(Body::from(json!([1, 2])).str_field("correlation_id"), None);
        assert_eq!(Body::from(Value::Null).str_field("correlation_id"), None);
    }
}
