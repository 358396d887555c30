//! The refusal of a schema that is not a valid JSON Schema: where inside the schema (the JSON
//! pointer of the meta-validation error), what is wrong there, and what the keyword at that place
//! takes (issue 44: `{"type": "banana"}` or `"required": "a"` used to be refused with neither).
use serde_json::Value;

use super::SUPPORTED_KEYWORDS;
use crate::Error;

/// Meta-validates `schema`: `Err` names the pointer, the problem and the fix.
pub(super) fn check(event_type: &str, schema: &Value) -> Result<(), Error> {
    let Err(e) = jsonschema::meta::validate(schema) else { return Ok(()) };
    let pointer = e.instance_path().as_str();
    let at = if pointer.is_empty() { "the top level".to_owned() } else { pointer.to_owned() };
    Err(Error::refused(format!("the schema for {event_type:?} is not a valid JSON Schema at {at}: {e}"))
        .with_fix(format!("at {at}, {}", takes(keyword_at(pointer).as_deref()))))
}

/// The keyword whose value the pointer leads into. Walks the pointer as the schema nests: a
/// segment at a schema is a keyword; under `properties` (and the like) comes a name, under
/// `allOf` (and the like) an index, each followed by a schema again; any other keyword's value
/// is data (`/required/0`, `/type/1`), where the walk stops. `None`: the schema itself.
fn keyword_at(pointer: &str) -> Option<String> {
    enum Next {
        Keyword,
        NameThenSchema,
        IndexThenSchema,
        /// `items`: a schema, or (drafts before 2020-12) an array of schemas.
        SchemaOrIndex,
    }
    let mut next = Next::Keyword;
    let mut keyword = None;
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        next = match next {
            // At a schema again: the pointer may end here, at the schema itself.
            Next::NameThenSchema | Next::IndexThenSchema => {
                keyword = None;
                Next::Keyword
            }
            Next::SchemaOrIndex if segment.parse::<usize>().is_ok() => {
                keyword = None;
                Next::Keyword
            }
            Next::Keyword | Next::SchemaOrIndex => {
                let n = match segment.as_str() {
                    "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                        Next::NameThenSchema
                    }
                    "allOf" | "anyOf" | "oneOf" | "prefixItems" => Next::IndexThenSchema,
                    "items" | "additionalItems" => Next::SchemaOrIndex,
                    "additionalProperties"
                    | "not"
                    | "if"
                    | "then"
                    | "else"
                    | "contains"
                    | "propertyNames"
                    | "unevaluatedProperties"
                    | "unevaluatedItems"
                    | "contentSchema" => Next::Keyword,
                    _ => {
                        keyword = Some(segment);
                        break;
                    }
                };
                keyword = Some(segment);
                n
            }
        };
    }
    keyword
}

/// What the keyword takes, as the fix of a value it cannot take.
fn takes(keyword: Option<&str>) -> String {
    let Some(k) = keyword else {
        return "a schema is a JSON object such as {\"type\": \"object\"}, or true or false".into();
    };
    match k {
        "type" => "\"type\" takes one of \"object\", \"array\", \"string\", \"number\", \"integer\", \"boolean\", \
                   \"null\", or an array of them, e.g. {\"type\": \"string\"}"
            .into(),
        "required" => "\"required\" takes an array of property names, e.g. {\"required\": [\"id\"]}".into(),
        "properties" => "\"properties\" takes an object of property names and their schemas, e.g. \
             {\"properties\": {\"id\": {\"type\": \"string\"}}}"
            .into(),
        "additionalProperties" | "items" => {
            format!("{k:?} takes a schema: an object such as {{\"type\": \"string\"}}, or true or false")
        }
        "enum" => "\"enum\" takes an array of the allowed values, e.g. {\"enum\": [\"new\", \"paid\"]}".into(),
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
            format!("{k:?} takes a number, e.g. {{{k:?}: 0}}")
        }
        "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties" => {
            format!("{k:?} takes a non-negative integer, e.g. {{{k:?}: 1}}")
        }
        "pattern" => "\"pattern\" takes a regular expression as a string, e.g. {\"pattern\": \"^[A-Z]{3}$\"}".into(),
        "$schema" => "\"$schema\" takes the URI of a draft, e.g. \"https://json-schema.org/draft/2020-12/schema\" \
                      (or leave it out: 2020-12)"
            .into(),
        "$id" => "\"$id\" takes a URI reference as a string".into(),
        "title" | "description" | "$comment" => format!("{k:?} takes a string"),
        "deprecated" | "readOnly" | "writeOnly" => format!("{k:?} takes true or false"),
        "examples" => "\"examples\" takes an array of example values".into(),
        _ if !SUPPORTED_KEYWORDS.contains(&k) => format!(
            "remove {k:?}: the database does not enforce it (the keywords it enforces are under \"Payload schemas\" \
             in docs/events.md)"
        ),
        _ => format!("give {k:?} a value of the form JSON Schema 2020-12 defines for it (docs/events.md)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keyword_is_found_through_names_indexes_and_values() {
        for (pointer, keyword) in [
            ("", None),
            ("/type", Some("type")),
            ("/type/1", Some("type")),
            ("/required", Some("required")),
            ("/properties/required", None),
            ("/properties/required/type", Some("type")),
            ("/properties/a~1b/items/minItems", Some("minItems")),
            ("/items/0/type", Some("type")),
            ("/allOf/2/required/0", Some("required")),
            ("/additionalProperties/enum", Some("enum")),
        ] {
            assert_eq!(keyword_at(pointer).as_deref(), keyword, "{pointer}");
        }
    }
}
