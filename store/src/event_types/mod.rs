//! The registry of known event types: their versions, each with an optional JSON Schema and an
//! upcast from the version before ([`versions`]), the compatibility mode checked when a version
//! is registered ([`compat`]), and aliases.
pub mod compat;
mod invalid_schema;
mod resource;
mod versions;

pub use resource::{TypeDocument, parse_documents};

pub use versions::{
    Applied, Compatibility, TypeInfo, TypeSpec, Version, VersionCount, VersionSpec, apply_type, apply_type_in, get,
    list_types, rename, version_counts,
};

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

/// Checks that `schema` is a valid JSON Schema (with the `jsonschema` crate's meta-schemas; a
/// refusal names the place inside the schema and what the keyword there takes) and that it only
/// uses keywords the database enforces.
pub fn check_schema(event_type: &str, schema: &Value) -> Result<()> {
    invalid_schema::check(event_type, schema)?;
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

/// Registers an event type, or checks that it is registered as given: idempotent.
///
/// A new type gets version 1 with `schema`. For a registered type, `schema` `None` changes
/// nothing (the registered versions stay); a schema equal to the latest version's changes
/// nothing; any other schema is refused with the fix (register it as the next version:
/// [`register_version`]). `description`, when given, replaces the registered one.
pub async fn register(
    pool: &PgPool,
    event_type: &str,
    schema: Option<&Value>,
    description: Option<&str>,
) -> Result<()> {
    if let Some(s) = schema {
        check_schema(event_type, s)?;
    }
    let mut tx = pool.begin().await?;
    let spec = match versions::read_locked(&mut tx, event_type).await? {
        None => TypeSpec {
            event_type: event_type.to_owned(),
            description: description.map(str::to_owned),
            versions: vec![VersionSpec { version: 1, schema: schema.cloned(), upcast: None }],
            ..Default::default()
        },
        Some(t) => {
            let latest = t.versions.last().expect("a registered type has a version");
            if let Some(s) = schema
                && Some(s) != latest.schema.as_ref()
            {
                let next = t.latest + 1;
                return Err(Error::refused(format!(
                    "{event_type:?} is registered (latest version {}) with a different schema: a new schema is a new version, \
                     checked against the type's compatibility mode ({})",
                    t.latest, t.compatibility
                ))
                .with_fix(format!(
                    "register it as version {next}: `highwater event-types register {event_type} --version {next} --schema FILE` \
                     (with --upcast EXPR if stored events need one)"
                )));
            }
            TypeSpec { description: description.map(str::to_owned).or(t.description.clone()), ..t.spec() }
        }
    };
    versions::apply_type_in(&mut tx, &spec).await?;
    tx.commit().await?;
    Ok(())
}

/// Registers version `version` of `event_type` with `schema` and an optional `upcast` from the
/// version before (see [`apply_type`]): idempotent for a version registered alike, refused for a
/// version registered otherwise, beyond the next, or incompatible under `compatibility` (the
/// type's mode when `None`; a mode given becomes the type's). Version 1 of a new type registers it.
pub async fn register_version(
    pool: &PgPool,
    event_type: &str,
    version: i32,
    schema: Option<&Value>,
    upcast: Option<&str>,
    compatibility: Option<Compatibility>,
    description: Option<&str>,
) -> Result<Applied> {
    let mut tx = pool.begin().await?;
    let mut spec = match versions::read_locked(&mut tx, event_type).await? {
        Some(t) => t.spec(),
        None => TypeSpec { event_type: event_type.to_owned(), ..Default::default() },
    };
    let latest = i32::try_from(spec.versions.len()).unwrap_or(i32::MAX);
    if version < 1 || version > latest + 1 {
        let (what, fix) = if version < 1 {
            ("versions start at 1".to_owned(), format!("--version {}", latest + 1))
        } else if latest == 0 {
            (format!("{event_type:?} is not registered: its first version is 1"), "--version 1".to_owned())
        } else {
            (
                format!("{event_type:?} is at version {latest}: the next is {}", latest + 1),
                format!("--version {}", latest + 1),
            )
        };
        return Err(Error::refused(format!("version {version} of {event_type:?} cannot be registered: {what}"))
            .with_fix(format!(
                "register the next version: `highwater event-types register {event_type} {fix} --schema FILE`"
            )));
    }
    let new = VersionSpec { version, schema: schema.cloned(), upcast: upcast.map(str::to_owned) };
    if version <= latest {
        spec.versions[usize::try_from(version - 1).unwrap_or(0)] = new;
    } else {
        spec.versions.push(new);
    }
    if let Some(c) = compatibility {
        spec.compatibility = c;
    }
    if let Some(d) = description {
        spec.description = Some(d.to_owned());
    }
    let applied = versions::apply_type_in(&mut tx, &spec).await?;
    tx.commit().await?;
    Ok(applied)
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

    /// Issue 44: the refusal names the JSON pointer inside the schema and what goes there.
    #[test]
    fn invalid_schemas_are_refused_at_their_json_pointer_with_a_fix() {
        for (schema, pointer, fix) in [
            (json!({"type": "banana"}), "at /type:", "\"type\" takes one of \"object\""),
            (json!({"required": "a"}), "at /required:", "\"required\" takes an array of property names"),
            (
                json!({"properties": {"total": {"type": "object", "properties": {"n": {"minimum": "0"}}}}}),
                "at /properties/total/properties/n/minimum:",
                "\"minimum\" takes a number",
            ),
            (json!({"properties": {"required": "a"}}), "at /properties/required:", "a schema is a JSON object"),
            (json!({"items": {"maxLength": -1}}), "at /items/maxLength:", "non-negative integer"),
            (json!(5), "at the top level:", "a schema is a JSON object"),
        ] {
            let Err(Error::Refused(r)) = check_schema("X", &schema) else { panic!("{schema} accepted") };
            assert!(r.problem.contains("not a valid JSON Schema") && r.problem.contains(pointer), "{schema}: {r}");
            let f = r.fix.unwrap_or_default();
            assert!(f.contains(fix) && f.starts_with(&pointer[..pointer.len() - 1]), "{schema}: {f}");
        }
    }
}
