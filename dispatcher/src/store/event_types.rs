//! The registry of known event types and their optional JSON Schemas.
use serde_json::Value;
use sqlx::{PgPool, types::Json};

use crate::{Error, Result};

/// Keywords that `highwater.json_schema_error` (migrations/…_append.sql) enforces, plus the
/// annotations that carry no constraint. A schema using anything else is refused at registration,
/// so no part of a registered schema is silently unchecked.
pub const SUPPORTED_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    // annotations
    "$schema",
    "$id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Checks that `schema` is a valid JSON Schema (with the `jsonschema` crate's meta-schemas) and
/// that it only uses keywords the database enforces.
pub fn check_schema(event_type: &str, schema: &Value) -> Result<()> {
    if let Err(e) = jsonschema::meta::validate(schema) {
        return Err(Error::refused(format!("the schema for {event_type:?} is not a valid JSON Schema: {e}")));
    }
    let mut unsupported = Vec::new();
    walk(schema, "$", &mut unsupported);
    if unsupported.is_empty() {
        Ok(())
    } else {
        Err(Error::refused(format!(
            "the schema for {event_type:?} uses keywords the database does not enforce: {}",
            unsupported.join(", ")
        ))
        .with_fix(format!(
            "\
             use only {} (see docs/events.md)",
            SUPPORTED_KEYWORDS.join(", ")
        )))
    }
}

fn walk(schema: &Value, path: &str, out: &mut Vec<String>) {
    let Value::Object(map) = schema else { return };
    for (k, v) in map {
        if !SUPPORTED_KEYWORDS.contains(&k.as_str()) {
            out.push(format!("{path}.{k}"));
            continue;
        }
        match k.as_str() {
            "properties" => {
                if let Value::Object(props) = v {
                    for (name, sub) in props {
                        walk(sub, &format!("{path}.properties.{name}"), out);
                    }
                }
            }
            "items" | "additionalProperties" => walk(v, &format!("{path}.{k}"), out),
            _ => {}
        }
    }
}

/// Registers (or replaces the schema of) an event type.
pub async fn register(
    pool: &PgPool,
    event_type: &str,
    schema: Option<&Value>,
    description: Option<&str>,
) -> Result<()> {
    if let Some(s) = schema {
        check_schema(event_type, s)?;
    }
    sqlx::query(
        "INSERT INTO highwater.event_types (event_type, json_schema, description) VALUES ($1, $2, $3)
         ON CONFLICT (event_type) DO UPDATE
            SET json_schema = EXCLUDED.json_schema, description = EXCLUDED.description, updated_at = now()",
    )
    .bind(event_type)
    .bind(schema.map(Json))
    .bind(description)
    .execute(pool)
    .await
    .map_err(|e| match e.as_database_error().and_then(|d| d.code()) {
        Some(c) if c == "23514" => Error::refused(format!("event type name {event_type:?} is invalid: start with a letter; use letters, digits and . _ : - (at most 200)")),
        _ => Error::Database(e),
    })?;
    Ok(())
}

#[derive(Debug, sqlx::FromRow, serde::Serialize)]
pub struct EventType {
    pub event_type: String,
    pub json_schema: Option<Json<Value>>,
    pub description: Option<String>,
}

pub async fn list(pool: &PgPool) -> Result<Vec<EventType>> {
    Ok(sqlx::query_as("SELECT event_type, json_schema, description FROM highwater.event_types ORDER BY event_type")
        .fetch_all(pool)
        .await?)
}

/// Names in `names` that are not registered.
pub async fn unknown(pool: &PgPool, names: &[String]) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT n FROM unnest($1::text[]) AS n
          WHERE NOT EXISTS (SELECT 1 FROM highwater.event_types t WHERE t.event_type = n)",
    )
    .bind(names)
    .fetch_all(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_the_supported_subset() {
        let s = json!({"type": "object", "required": ["id"], "properties": {"id": {"type": "integer", "minimum": 1}},
                       "additionalProperties": false});
        check_schema("OrderPlaced", &s).unwrap();
    }

    #[test]
    fn refuses_unsupported_keywords_by_path() {
        let s = json!({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}});
        let e = check_schema("X", &s).unwrap_err().to_string();
        assert!(e.contains("$.properties.a.oneOf"), "{e}");
    }

    #[test]
    fn refuses_invalid_schemas() {
        let e = check_schema("X", &json!({"type": "banana"})).unwrap_err().to_string();
        assert!(e.contains("not a valid JSON Schema"), "{e}");
    }
}
