//! Property tests of what highwater accepts from outside: consumer definitions (arbitrary and
//! mutated YAML), event-type schemas and payloads (arbitrary JSON, the payloads checked by the
//! database against a schema and compared with the `jsonschema` crate), and the SSE
//! `Last-Event-ID` header. Each input either works or gets a clear error; nothing panics.
mod common;

use highwater::{Error, NewEvent, append, definitions, event_types, sse::parse_last_event_id};
use proptest::{prelude::*, test_runner::TestRunner};
use serde_json::{Value, json};

const VALID: &str = "---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: orders-projection, namespace: shop}
spec:
  delivery: Shared
  eventTypes: [OrderPlaced, OrderPaid]
  batchSize: 50
  maxAttempts: 5
  errorMode: halt
  startFrom: earliest
  backoff: {initial: 1s, max: 30s}
  sink:
    sql: {statement: 'INSERT INTO orders_seen VALUES ($2)', timeout: 5s}
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: hook}
spec:
  delivery: PerInstance
  sink: {webhook: {url: 'http://127.0.0.1:9/hook', timeout: 2s}}
";

/// One edit of a text: delete a span, insert text, or duplicate a line.
#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, String),
    DuplicateLine(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let fragments = prop_oneof![
        Just(": ".to_owned()),
        Just("\n".to_owned()),
        Just("  ".to_owned()),
        Just("- ".to_owned()),
        Just("{".to_owned()),
        Just("]".to_owned()),
        Just("&a ".to_owned()),
        Just("*a".to_owned()),
        Just("!!binary ".to_owned()),
        Just("'".to_owned()),
        Just("-1".to_owned()),
        Just("99999999999999999999".to_owned()),
        Just("null".to_owned()),
        Just("~".to_owned()),
        Just("\u{0}".to_owned()),
        ".{0,12}",
    ];
    prop_oneof![
        (any::<usize>(), 1..20usize).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), fragments).prop_map(|(a, s)| Edit::Insert(a, s)),
        any::<usize>().prop_map(Edit::DuplicateLine),
    ]
}

fn apply_edit(text: &str, e: &Edit) -> String {
    let at = |a: usize| {
        let mut i = a % (text.len() + 1);
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match e {
        Edit::Delete(a, n) => {
            let s = at(*a);
            let mut end = (s + n).min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{}", &text[..s], &text[end..])
        }
        Edit::Insert(a, frag) => {
            let s = at(*a);
            format!("{}{frag}{}", &text[..s], &text[s..])
        }
        Edit::DuplicateLine(a) => {
            let lines: Vec<&str> = text.lines().collect();
            let i = a % lines.len();
            let mut out: Vec<&str> = lines[..=i].to_vec();
            out.extend(&lines[i..]);
            out.join("\n")
        }
    }
}

/// The contract of `definitions::parse`: definitions that pass validation, or one error that
/// names the source and document.
fn check_parse(text: &str) -> Result<(), TestCaseError> {
    match definitions::parse(text, "prop") {
        Ok(defs) => {
            for d in defs {
                prop_assert!(d.spec.validate(&d.name).is_ok(), "a definition that fails validation: {}", d.name);
            }
        }
        Err(e @ Error::Definition { .. }) => {
            let m = e.to_string();
            prop_assert!(m.starts_with("invalid consumer definition in prop (document "), "{m}");
        }
        Err(other) => prop_assert!(false, "not a definition error: {other:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn definitions_from_arbitrary_text_parse_or_fail_clearly(text in ".{0,400}") {
        check_parse(&text)?;
    }

    #[test]
    fn mutated_definitions_parse_or_fail_clearly(edits in prop::collection::vec(edit(), 1..6)) {
        let text = edits.iter().fold(VALID.to_owned(), |t, e| apply_edit(&t, e));
        check_parse(&text)?;
    }

    /// Hostile names and odd field values in an otherwise well-formed document.
    #[test]
    fn definitions_with_arbitrary_values_parse_or_fail_clearly(
        name in prop_oneof![".{0,80}", "[a-z0-9-]{1,70}", Just("__shared__".to_owned())],
        delivery in prop_oneof![Just("Shared".to_owned()), Just("PerInstance".to_owned()), ".{0,10}"],
        batch in any::<i64>(),
        attempts in any::<i64>(),
        backoff in prop_oneof![Just("1s".to_owned()), ".{0,10}"],
    ) {
        let doc = json!({
            "apiVersion": "highwater.dev/v1alpha1",
            "kind": "EventConsumer",
            "metadata": {"name": name},
            "spec": {
                "delivery": delivery, "batchSize": batch, "maxAttempts": attempts,
                "backoff": {"initial": backoff, "max": "30s"},
                "sink": {"log": {"target": "stderr"}},
            },
        });
        check_parse(&serde_yaml::to_string(&doc).unwrap())?;
    }

    #[test]
    fn last_event_id_is_an_event_id_or_refused(value in prop_oneof![".{0,30}", "[ 0-9+-]{0,25}"]) {
        let t = value.trim();
        let digits = !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        let expected = digits.then(|| t.parse::<i64>().ok()).flatten();
        prop_assert_eq!(parse_last_event_id(&value), expected);
    }

    #[test]
    fn instance_ids_are_accepted_or_refused_with_the_rule(
        id in prop_oneof![".{0,300}", "[a-z0-9-]{1,60}", Just("__shared__".to_owned())],
    ) {
        let allowed = !id.is_empty()
            && id.len() <= 253
            && id != "__shared__"
            && !id.chars().any(|c| c.is_whitespace() || c.is_control());
        match highwater::instance::validate(&id) {
            Ok(()) => prop_assert!(allowed, "accepted: {id:?}"),
            Err(Error::Config(m)) => {
                let m = m.to_string();
                prop_assert!(!allowed, "refused: {id:?}");
                prop_assert!(m.contains("fix:") || m.contains("use 1-253 printable characters"), "{m}");
            }
            Err(other) => prop_assert!(false, "not a configuration error: {other:?}"),
        }
    }

    #[test]
    fn every_event_id_round_trips_through_last_event_id(id in 0..=i64::MAX) {
        prop_assert_eq!(parse_last_event_id(&id.to_string()), Some(id));
    }

    #[test]
    fn arbitrary_schemas_are_accepted_or_refused_with_a_reason(schema in json_value()) {
        match event_types::check_schema("T", &schema) {
            Ok(()) => {}
            Err(Error::Refused(m)) => prop_assert!(m.to_string().contains("\"T\""), "{m}"),
            Err(other) => prop_assert!(false, "not a refusal: {other:?}"),
        }
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6..1e6f64).prop_map(Value::from),
        prop_oneof![Just(1.0f64), Just(0.5), Just(1e300)].prop_map(Value::from),
        ".{0,10}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        let key = prop_oneof![
            Just("type".to_owned()),
            Just("name".to_owned()),
            Just("n".to_owned()),
            Just("tags".to_owned()),
            Just("properties".to_owned()),
            ".{0,6}"
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Payloads near the schema below: objects with its property names and arbitrary values.
fn payload() -> impl Strategy<Value = Value> {
    let key = prop_oneof![Just("name"), Just("n"), Just("tags"), Just("kind"), Just("extra")].prop_map(str::to_owned);
    prop_oneof![
        1 => json_value(),
        3 => prop::collection::btree_map(key, json_value(), 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
    ]
}

fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["name"],
        "additionalProperties": false,
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 5},
            "n": {"type": "integer", "minimum": 0, "maximum": 10},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "kind": {"enum": ["a", "b", null]},
            "extra": {"type": ["number", "boolean"]}
        }
    })
}

/// The database's schema check (a PL/pgSQL function run by `highwater.append`) against the
/// `jsonschema` crate's verdict on the same payload: they agree, and a refusal is an
/// `InvalidPayload` error that names the event type and the fix.
#[test]
fn payloads_are_stored_or_refused_as_the_schema_says() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(common::setup(&[]));
    rt.block_on(event_types::register(&db.pool, "Shaped", Some(&schema()), None)).unwrap();
    let model = jsonschema::validator_for(&schema()).unwrap();
    let config = ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = TestRunner::new(config);
    runner
        .run(&payload(), |p| {
            let stored = rt.block_on(async {
                let mut tx = db.pool.begin().await.unwrap();
                let r = append(&mut tx, &NewEvent::new("s", "1", "Shaped", p.clone())).await;
                tx.rollback().await.unwrap();
                r
            });
            // jsonb cannot hold U+0000: refused whatever the schema says, with that reason.
            if p.to_string().contains("\\u0000") {
                let refused =
                    matches!(&stored, Err(Error::InvalidPayload { hint: Some(h), .. }) if h.contains("\\u0000"));
                prop_assert!(refused, "a payload with U+0000: {stored:?}");
                return Ok(());
            }
            match stored {
                Ok(_) => prop_assert!(model.is_valid(&p), "stored, but the schema refuses it: {p}"),
                Err(Error::InvalidPayload { message, hint }) => {
                    prop_assert!(!model.is_valid(&p), "refused ({message}), but the schema accepts it: {p}");
                    prop_assert!(message.contains("\"Shaped\""), "{message}");
                    prop_assert!(hint.is_some_and(|h| h.contains("fix the payload")));
                }
                Err(other) => prop_assert!(false, "neither stored nor refused as invalid: {other:?} for {p}"),
            }
            Ok(())
        })
        .unwrap();
}
