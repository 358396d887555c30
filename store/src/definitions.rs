//! Consumer definitions: `EventConsumer` YAML documents (the same files `kubectl apply` takes)
//! parsed, validated and stored as rows of `highwater.consumers`.
use std::{collections::BTreeMap, path::Path};

use highwater_crds::{
    API_VERSION, CONSUMER_NUMBERS, ConsumerSpec, Delivery, EVENT_TYPE_KIND, EventVersions, KIND, SHARED_INSTANCE,
};
use serde::Deserialize;
use sqlx::{PgPool, types::Json};

use super::yaml_numbers::{Field, take_bad};
use crate::{Error, Result, event_types, notify, shards};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    api_version: String,
    kind: String,
    metadata: Metadata,
    spec: ConsumerSpec,
    #[serde(default)]
    #[allow(dead_code)]
    status: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
    #[allow(dead_code)]
    #[serde(default)]
    namespace: Option<String>,
    #[allow(dead_code)]
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[allow(dead_code)]
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// Prefix of the `source` of definitions that come from `EventConsumer` resources:
/// `kubernetes:<namespace>/<name>`.
pub const KUBERNETES_SOURCE: &str = "kubernetes:";

/// A validated consumer definition.
#[derive(Clone, Debug, PartialEq)]
pub struct Definition {
    pub name: String,
    pub spec: ConsumerSpec,
    /// Where it came from, e.g. `file:examples/orders.yaml`.
    pub source: String,
}

/// Parses every `EventConsumer` document of a YAML stream; the first bad one fails the lot.
///
/// A YAML syntax error anywhere in the stream is reported first, as itself, with its line and
/// column: deserialized straight into the typed spec, `delivery: [Shared` would surface as "invalid
/// type: sequence, expected a YAML tag" instead of the unclosed `[`.
pub fn parse(text: &str, source: &str) -> Result<Vec<Definition>> {
    check_syntax(text, source)?;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let origin = format!("{source} (document {})", i + 1);
        let bad = |problem: String| Error::Definition { origin: origin.clone(), problem };
        let Some(mut value) = Option::<serde_yaml::Value>::deserialize(doc).map_err(|e| bad(e.to_string()))? else {
            continue;
        };
        // An `EventType` beside the consumers (one GitOps folder, examples/): the operator
        // applies those, and `highwater event-types register` outside Kubernetes.
        if value.get("kind").and_then(|k| k.as_str()) == Some(EVENT_TYPE_KIND)
            && value.get("apiVersion").and_then(|v| v.as_str()) == Some(API_VERSION)
        {
            tracing::warn!(
                origin = %origin,
                "skipped an EventType document: `consumer apply` applies EventConsumers only; the operator applies \
                 EventTypes (kubectl apply), `highwater event-types apply -f` outside Kubernetes"
            );
            continue;
        }
        // Every problem of the document together: the numbers and eventVersions first (replaced
        // or taken out when bad, so that the typed parse goes on), then the parse's or the
        // validation's.
        let mut problems = value.get_mut("spec").map(spec_numbers).unwrap_or_default();
        let d: Document = match serde_yaml::from_value(value) {
            Ok(d) => d,
            Err(e) => {
                problems.push(e.to_string());
                return Err(bad(problems.join("; ")));
            }
        };
        if d.api_version != API_VERSION || d.kind != KIND {
            return Err(bad(format!(
                "expected apiVersion: {API_VERSION} and kind: {KIND}, found {} {}",
                d.api_version, d.kind
            )));
        }
        let name = d.spec.consumer_name.clone().unwrap_or(d.metadata.name);
        if let Err(e) = d.spec.validate(&name) {
            problems.extend(e.problems);
        }
        if !problems.is_empty() {
            return Err(bad(problems.join("; ")));
        }
        out.push(Definition { name, spec: d.spec, source: source.to_owned() });
    }
    Ok(out)
}

/// The problems of the spec's whole-number fields (each replaced when bad, see yaml_numbers.rs)
/// and of `eventVersions` (taken out when bad: it is optional).
fn spec_numbers(spec: &mut serde_yaml::Value) -> Vec<String> {
    // No sequence in these paths: the path found is the field's.
    let problem = |path: &str, shown: &str, integer: bool| {
        CONSUMER_NUMBERS.iter().find(|n| n.path == path).map(|n| n.problem(shown, integer)).unwrap_or_default()
    };
    let fields: Vec<Field<'_>> = CONSUMER_NUMBERS
        .iter()
        .map(|n| Field { path: n.path, min: n.min.into(), max: n.max.into(), problem: &problem })
        .collect();
    let mut out = take_bad(spec, &fields);
    if let serde_yaml::Value::Mapping(m) = spec
        && let Some(v) = m.get("eventVersions")
    {
        let checked = serde_json::to_value(v).map_err(|e| e.to_string()).and_then(EventVersions::try_from);
        if let Err(e) = checked {
            out.push(e);
            m.remove("eventVersions");
        }
    }
    out
}

/// Fails on the first YAML syntax error of the stream, naming the document, line and column.
fn check_syntax(text: &str, source: &str) -> Result<()> {
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        // After a syntax error the stream yields the same error forever: stop at the first.
        if let Err(e) = serde::de::IgnoredAny::deserialize(doc) {
            let at = e.location().map(|l| format!(" at line {} column {}", l.line(), l.column())).unwrap_or_default();
            let place = match (source.strip_prefix("file:"), e.location()) {
                (Some(file), Some(l)) => format!("{file}:{}:{}", l.line(), l.column()),
                (Some(file), None) => file.to_owned(),
                (None, _) => format!("the YAML{at}"),
            };
            return Err(Error::Definition {
                origin: format!("{source} (document {})", i + 1),
                problem: format!(
                    "YAML syntax error{at}: {e}\n  fix: correct the YAML at {place} (an unclosed [ or {{, \
                     a tab or a wrong indentation are the usual causes)"
                ),
            });
        }
    }
    Ok(())
}

/// Reads a file, or every `*.yaml`/`*.yml` file of a directory in name order.
pub fn load(path: &Path) -> Result<Vec<Definition>> {
    let mut files = Vec::new();
    if path.is_dir() {
        for e in std::fs::read_dir(path).map_err(Error::io(format!("reading {}", path.display())))? {
            let p = e.map_err(Error::io("reading a directory entry"))?.path();
            if matches!(p.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")) {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_owned());
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(Error::io(format!("reading {}", f.display())))?;
        out.extend(parse(&text, &format!("file:{}", f.display()))?);
    }
    Ok(out)
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Applied {
    Created,
    Updated,
    Unchanged,
}

/// Stores definitions in one transaction: all or nothing. Registers the shared shard of shared
/// consumers right away, so retention never prunes what they have not seen.
pub async fn apply(pool: &PgPool, defs: &[Definition]) -> Result<Vec<(String, Applied)>> {
    let mut seen = std::collections::HashSet::new();
    for d in defs {
        if !seen.insert(&d.name) {
            return Err(Error::refused(format!("consumer {:?} is defined twice in this input", d.name)));
        }
        let unknown = event_types::unknown(pool, &d.spec.event_types).await?;
        if !unknown.is_empty() {
            return Err(Error::refused(format!(
                "consumer {:?} ({}) filters on unknown event types: {}",
                d.name,
                d.source,
                unknown.join(", ")
            ))
            .with_fix(
                "register them with \
                 `highwater event-types register NAME`, or correct eventTypes",
            ));
        }
    }
    for d in defs {
        if let Some(sql) = &d.spec.sink.sql
            && statement_changed(pool, &d.name, sql).await?
        {
            super::sink_statement::check(pool, &d.name, &d.source, sql).await?;
        }
        // Checked when it changes (the operator applies unchanged specs often).
        if let Some(filter) = &d.spec.filter
            && filter_changed(pool, &d.name, filter).await?
        {
            crate::event_filter::check(pool, &d.name, &d.source, filter).await?;
        }
    }
    let mut tx = pool.begin().await?;
    let mut out = Vec::new();
    for d in defs {
        let existing: Option<(String, Json<ConsumerSpec>, bool, String)> = sqlx::query_as(
            "SELECT delivery, spec, suspended, source FROM highwater.consumers WHERE name = $1 FOR UPDATE",
        )
        .bind(&d.name)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((_, _, _, owner)) = &existing
            && owner != &d.source
            && (owner.starts_with(KUBERNETES_SOURCE) || d.source.starts_with(KUBERNETES_SOURCE))
        {
            return Err(Error::Conflict(format!(
                "consumer {:?} is already declared by {owner}; {} cannot claim it too\n  fix: give one \
                 of them another consumerName (or metadata.name), or delete the other declaration",
                d.name, d.source
            )));
        }
        if let Some((delivery, _, _, _)) = &existing
            && delivery != d.spec.delivery.as_str()
        {
            return Err(Error::refused(format!(
                "consumer {:?}: delivery cannot change from {delivery} to {} (its cursors belong \
                     to the old mode)",
                d.name,
                d.spec.delivery.as_str()
            ))
            .with_fix(format!(
                "`highwater consumer delete {}` and apply again, or \
                     use a new name",
                d.name
            )));
        }
        let outcome = match &existing {
            None => Applied::Created,
            Some((_, old, _, _)) if old.0 == d.spec => Applied::Unchanged,
            Some(_) => Applied::Updated,
        };
        if outcome != Applied::Unchanged {
            upsert(&mut tx, d).await?;
        }
        let mut registered = false;
        let mut repartition = shards::Repartition::None;
        if d.spec.delivery == Delivery::Shared {
            registered |= shards::register(&mut tx, &d.name, SHARED_INSTANCE, None).await?;
            // A new partition count: refused while a partition is dead (the whole apply rolls
            // back), else a barrier is set and, where every shard already stands at it, the new
            // split replaces the old one now.
            repartition = shards::repartition(&mut tx, &d.name, true).await?;
        }
        // A new read model with a bootstrap is filled from the application's tables before its
        // first event: its shard stays disabled until the bootstrap ran (below, after commit).
        if registered && d.spec.sink.sql.as_ref().is_some_and(|s| s.bootstrap.is_some()) {
            crate::ops::mark_bootstrap_pending(&mut tx, &d.name).await?;
        }
        let was_suspended = existing.as_ref().is_some_and(|e| e.2);
        if d.spec.suspend != was_suspended {
            let to = if d.spec.suspend { shards::Status::Disabled } else { shards::Status::Idle };
            sqlx::query(
                "UPDATE highwater.consumer_shards SET status = $2, updated_at = now()
                  WHERE consumer = $1 AND (($2 = $3 AND status <> $3)
                        OR ($2 = $4 AND status = $3 AND NOT bootstrap_pending))",
            )
            .bind(&d.name)
            .bind(to)
            .bind(shards::Status::Disabled)
            .bind(shards::Status::Idle)
            .execute(&mut *tx)
            .await?;
        }
        // Only real changes wake the dispatchers: the operator re-applies unchanged specs often.
        if outcome != Applied::Unchanged
            || registered
            || d.spec.suspend != was_suspended
            || repartition != shards::Repartition::None
        {
            notify::control(&mut *tx, &d.name).await?;
        }
        out.push((d.name.clone(), outcome));
    }
    tx.commit().await?;
    // Bootstraps not run yet (just created, or failed before): each in its own snapshot.
    let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    let pending: Vec<String> = sqlx::query_scalar(
        "SELECT consumer FROM highwater.consumer_shards WHERE consumer = ANY ($1) AND bootstrap_pending ORDER BY 1",
    )
    .bind(&names)
    .fetch_all(pool)
    .await?;
    for name in pending {
        crate::ops::bootstrap(pool, &name).await?;
    }
    Ok(out)
}

/// Whether `sql`'s statement is new to the consumer: the operator applies unchanged specs again
/// and again, and the check (which writes the catalog, then rolls back) is for a new statement.
async fn statement_changed(pool: &PgPool, name: &str, sql: &highwater_crds::SqlSink) -> Result<bool> {
    let stored: Option<Json<ConsumerSpec>> = sqlx::query_scalar("SELECT spec FROM highwater.consumers WHERE name = $1")
        .bind(name)
        .fetch_optional(pool)
        .await?;
    Ok(stored.and_then(|s| s.0.sink.sql).is_none_or(|old| old.statement != sql.statement || old.form != sql.form))
}

async fn filter_changed(pool: &PgPool, name: &str, filter: &str) -> Result<bool> {
    let stored: Option<Option<String>> =
        sqlx::query_scalar("SELECT spec->>'filter' FROM highwater.consumers WHERE name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await?;
    Ok(stored.flatten().as_deref() != Some(filter))
}

async fn upsert(conn: &mut sqlx::PgConnection, d: &Definition) -> Result<()> {
    let s = &d.spec;
    sqlx::query(
        "INSERT INTO highwater.consumers
            (name, delivery, consumer_group, max_attempts, batch_size, event_types, start_from,
             error_mode, suspended, sink, spec, source, partitions)
         -- The types with their former names (event_type_aliases): what status and applied
         -- read. The dispatcher expands the spec's the same way when it loads it (load_group).
         VALUES ($1, $2, $3, $4, $5,
                 $6::text[] || ARRAY(SELECT a.alias FROM highwater.event_type_aliases a
                                      WHERE a.event_type = ANY ($6::text[]) AND NOT a.alias = ANY ($6::text[])
                                      ORDER BY a.alias),
                 $7, $8, $9, $10, $11, $12, $13)
         ON CONFLICT (name) DO UPDATE SET
            consumer_group = EXCLUDED.consumer_group, max_attempts = EXCLUDED.max_attempts,
            batch_size = EXCLUDED.batch_size, event_types = EXCLUDED.event_types,
            start_from = EXCLUDED.start_from, error_mode = EXCLUDED.error_mode,
            suspended = EXCLUDED.suspended, sink = EXCLUDED.sink, spec = EXCLUDED.spec,
            source = EXCLUDED.source, partitions = EXCLUDED.partitions, updated_at = now()",
    )
    .bind(&d.name)
    .bind(s.delivery.as_str())
    .bind(&s.group)
    .bind(s.max_attempts as i32)
    .bind(s.batch_size as i32)
    .bind(&s.event_types)
    .bind(s.effective_start_from().as_str())
    .bind(s.error_mode.as_str())
    .bind(s.suspend)
    .bind(Json(&s.sink))
    .bind(Json(s))
    .bind(&d.source)
    .bind(s.partitions as i32)
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether a consumer named `name` is defined (it may have no shards yet).
pub async fn exists(pool: &PgPool, name: &str) -> Result<bool> {
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM highwater.consumers WHERE name = $1)")
        .bind(name)
        .fetch_one(pool)
        .await?)
}

/// Deletes a consumer and all its shards.
pub async fn delete(pool: &PgPool, name: &str) -> Result<()> {
    let n = sqlx::query("DELETE FROM highwater.consumers WHERE name = $1").bind(name).execute(pool).await?;
    if n.rows_affected() == 0 {
        return Err(Error::no_consumer(name));
    }
    notify::control(pool, name).await?;
    Ok(())
}

/// The definitions a dispatcher of `group` runs.
pub async fn load_group(pool: &PgPool, group: &str) -> Result<Vec<Definition>> {
    let rows: Vec<(String, Json<ConsumerSpec>, String)> =
        sqlx::query_as("SELECT name, spec, source FROM highwater.consumers WHERE consumer_group = $1 ORDER BY name")
            .bind(group)
            .fetch_all(pool)
            .await?;
    let mut defs: Vec<Definition> =
        rows.into_iter().map(|(name, spec, source)| Definition { name, spec: spec.0, source }).collect();
    with_aliases(pool, &mut defs).await?;
    Ok(defs)
}

/// Adds to each definition's event types their former names (`event-types rename`), so that a
/// consumer of a renamed type also reads the events stored under the old name (the bug of
/// Marten #2615 avoided). One statement per load, nothing when no type was ever renamed.
pub async fn with_aliases(pool: &PgPool, defs: &mut [Definition]) -> Result<()> {
    if defs.iter().all(|d| d.spec.event_types.is_empty()) {
        return Ok(());
    }
    let aliases: Vec<(String, String)> =
        sqlx::query_as("SELECT event_type, alias FROM highwater.event_type_aliases ORDER BY event_type, alias")
            .fetch_all(pool)
            .await?;
    if aliases.is_empty() {
        return Ok(());
    }
    for d in defs.iter_mut() {
        let types = &mut d.spec.event_types;
        let add: Vec<String> =
            aliases.iter().filter(|(t, a)| types.contains(t) && !types.contains(a)).map(|(_, a)| a.clone()).collect();
        types.extend(add);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples users copy parse and validate, the broker relays among them (what
    /// `highwater consumer apply -f examples/` reads).
    #[test]
    fn the_examples_load() {
        let defs = load(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples"))).unwrap();
        let kinds: Vec<&str> = defs.iter().map(|d| d.spec.sink_kind()).collect();
        assert!(kinds.contains(&"kafka") && kinds.contains(&"nats"), "{kinds:?}");
    }

    const GOOD: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: orders}
spec:
  delivery: Shared
  eventTypes: [OrderPlaced]
  sink: {log: {}}
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: live}
spec:
  delivery: PerInstance
  sink: {log: {target: stderr}}
"#;

    #[test]
    fn parses_multi_document_files() {
        let d = parse(GOOD, "file:x.yaml").unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].name, "orders");
        assert_eq!(d[1].spec.delivery, Delivery::PerInstance);
    }

    #[test]
    fn unknown_field_is_named_with_its_place() {
        let bad = GOOD.replace("eventTypes", "eventType");
        let e = parse(&bad, "file:x.yaml").unwrap_err().to_string();
        assert!(e.contains("unknown field `eventType`") && e.contains("document 1"), "{e}");
    }

    #[test]
    fn event_type_documents_are_passed_over() {
        let et = "---\napiVersion: highwater.dev/v1alpha1\nkind: EventType\nmetadata: {name: order-placed}\nspec: {eventType: OrderPlaced}\n";
        let defs = parse(&format!("{et}---{GOOD}"), "f").unwrap();
        assert_eq!(defs, parse(GOOD, "f").unwrap(), "the consumers, without the EventType");
    }

    #[test]
    fn wrong_kind_is_refused() {
        let e = parse(&GOOD.replace("kind: EventConsumer", "kind: Deployment"), "f").unwrap_err().to_string();
        assert!(e.contains("kind: EventConsumer"), "{e}");
    }

    #[test]
    fn bad_value_is_refused() {
        let e = parse(&GOOD.replace("delivery: Shared", "delivery: Sometimes"), "f").unwrap_err().to_string();
        assert!(e.contains("Sometimes"), "{e}");
    }

    #[test]
    fn yaml_syntax_errors_name_the_file_line_and_column() {
        let e = parse(&GOOD.replace("delivery: Shared", "delivery: [Shared"), "file:x.yaml").unwrap_err();
        let Error::Definition { origin, problem } = &e else { panic!("{e:?}") };
        assert_eq!(origin, "file:x.yaml (document 1)");
        // The `[` opens on line 6 column 13; the parser gives up on line 7, at `eventTypes:`'s colon.
        assert!(problem.starts_with("YAML syntax error at line 7 column 13: did not find expected ',' or ']'"), "{e}");
        assert!(problem.contains("while parsing a flow sequence at line 6 column 13"), "{e}");
        assert!(problem.contains("\n  fix: correct the YAML at x.yaml:7:13 "), "{e}");
        assert!(!problem.contains("YAML tag"), "{e}");
        // In a later document, after a good one: that document is named.
        let e = parse(&format!("{GOOD}---\nkind: {{oops\n"), "file:x.yaml").unwrap_err().to_string();
        assert!(e.contains("(document 3)") && e.contains("YAML syntax error at line"), "{e}");
    }

    #[test]
    fn sse_on_shared_is_refused() {
        let e = parse(&GOOD.replace("sink: {log: {}}", "sink: {sse: {}}"), "f").unwrap_err().to_string();
        assert!(e.contains("PerInstance"), "{e}");
    }
}
