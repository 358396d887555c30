//! Versions of an event type (issue 36, part 2; docs/events.md "Versions"): each with its own
//! JSON Schema and an optional upcast from the version before it, a compatibility mode checked
//! when a version is registered, and aliases (former names whose stored events stay readable).
//!
//! [`apply_type`] is the one way versions are registered (the CLI and the operator's `EventType`
//! resource both call it): declarative, idempotent, one transaction.
use std::fmt;

use serde_json::Value;
use sqlx::{PgConnection, PgPool, Row, types::Json};

use super::{check_schema, compat};
use crate::{Error, Result};

/// How a new version must relate to the ones before it (checked at registration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compatibility {
    /// Consumers of the new version can read every stored event of the previous version (after
    /// its upcast, if any): every payload valid under it is valid under the new schema.
    #[default]
    Backward,
    /// [`Compatibility::Backward`] against every earlier version.
    BackwardTransitive,
    /// Consumers of the previous version can read events of the new one.
    Forward,
    ForwardTransitive,
    /// Backward and forward.
    Full,
    FullTransitive,
    /// No check.
    None,
}

impl Compatibility {
    pub const ALL: [Compatibility; 7] = [
        Compatibility::Backward,
        Compatibility::BackwardTransitive,
        Compatibility::Forward,
        Compatibility::ForwardTransitive,
        Compatibility::Full,
        Compatibility::FullTransitive,
        Compatibility::None,
    ];

    /// The name stored in `highwater.event_types.compatibility` and printed (`backward_transitive`).
    pub fn as_str(self) -> &'static str {
        match self {
            Compatibility::Backward => "backward",
            Compatibility::BackwardTransitive => "backward_transitive",
            Compatibility::Forward => "forward",
            Compatibility::ForwardTransitive => "forward_transitive",
            Compatibility::Full => "full",
            Compatibility::FullTransitive => "full_transitive",
            Compatibility::None => "none",
        }
    }

    fn backward(self) -> bool {
        matches!(
            self,
            Compatibility::Backward
                | Compatibility::BackwardTransitive
                | Compatibility::Full
                | Compatibility::FullTransitive
        )
    }

    fn forward(self) -> bool {
        matches!(
            self,
            Compatibility::Forward
                | Compatibility::ForwardTransitive
                | Compatibility::Full
                | Compatibility::FullTransitive
        )
    }

    fn transitive(self) -> bool {
        matches!(
            self,
            Compatibility::BackwardTransitive | Compatibility::ForwardTransitive | Compatibility::FullTransitive
        )
    }
}

impl fmt::Display for Compatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Compatibility {
    type Err = Error;
    /// `backward_transitive`, `backward-transitive`, `BACKWARD_TRANSITIVE` and
    /// `BackwardTransitive` are the same mode.
    fn from_str(s: &str) -> Result<Self> {
        let norm: String = s.chars().filter(|c| *c != '_' && *c != '-').collect::<String>().to_ascii_lowercase();
        Compatibility::ALL.into_iter().find(|c| c.as_str().replace('_', "") == norm).ok_or_else(|| {
            Error::refused(format!("unknown compatibility mode {s:?}"))
                .with_fix(format!("use one of {}", Compatibility::ALL.map(Compatibility::as_str).join(", ")))
        })
    }
}

/// One version of a type as declared.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct VersionSpec {
    pub version: i32,
    /// Its JSON Schema; `None`: any JSON payload.
    pub schema: Option<Value>,
    /// A SQL expression over `payload` (jsonb) giving the payload of this version from one of
    /// the version before, e.g. `jsonb_set(payload, '{currency}', '"EUR"')`. Only for
    /// versions above 1.
    pub upcast: Option<String>,
}

/// A type as declared: every version from 1, in order.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct TypeSpec {
    pub event_type: String,
    /// `None` keeps the registered description.
    pub description: Option<String>,
    pub compatibility: Compatibility,
    /// Versions 1..=N. Empty: version 1 without a schema.
    pub versions: Vec<VersionSpec>,
    /// Former names of the type: consumers of `event_type` also get the events stored under
    /// them. Each stays a registered type (registered without a schema when missing).
    pub aliases: Vec<String>,
}

/// What [`apply_type`] did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Applied {
    /// The versions registered by this call, in order (empty: nothing new).
    pub registered: Vec<i32>,
    pub latest: i32,
    /// What the registry wants the operator to know although it registered (the open content
    /// model checked against the stored events instead of refused, ...).
    pub notes: Vec<String>,
}

/// Stored events of a type per schema version.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct VersionCount {
    pub version: i32,
    pub events: i64,
}

/// A registered version.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Version {
    pub version: i32,
    pub schema: Option<Value>,
    pub upcast: Option<String>,
}

/// A registered type with its versions.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TypeInfo {
    pub event_type: String,
    pub description: Option<String>,
    pub compatibility: Compatibility,
    pub latest: i32,
    pub versions: Vec<Version>,
    pub aliases: Vec<String>,
    /// The type this one is an alias of, if it is one.
    pub alias_of: Option<String>,
}

impl TypeInfo {
    /// The spec that [`apply_type`] would find already applied.
    pub fn spec(&self) -> TypeSpec {
        TypeSpec {
            event_type: self.event_type.clone(),
            description: self.description.clone(),
            compatibility: self.compatibility,
            versions: self
                .versions
                .iter()
                .map(|v| VersionSpec { version: v.version, schema: v.schema.clone(), upcast: v.upcast.clone() })
                .collect(),
            aliases: self.aliases.clone(),
        }
    }
}

fn invalid_name(name: &str) -> Error {
    Error::refused(format!("event type name {name:?} is invalid"))
        .with_fix("start with a letter; use letters, digits and . _ : - (at most 200)")
}

fn map_db(name: &str, e: sqlx::Error) -> Error {
    match e.as_database_error().and_then(|d| d.code()) {
        Some(c) if c == "23514" => invalid_name(name),
        _ => Error::Database(e),
    }
}

/// The registered type `name` with its versions, or `None`.
pub async fn get(pool: &PgPool, name: &str) -> Result<Option<TypeInfo>> {
    read(&mut *pool.acquire().await?, name, false).await
}

/// Reads a type; `lock` takes its registry row FOR UPDATE (registrations of one type queue).
async fn read(conn: &mut PgConnection, name: &str, lock: bool) -> Result<Option<TypeInfo>> {
    let sql = if lock {
        "SELECT json_schema, description, compatibility, latest_version FROM highwater.event_types
          WHERE event_type = $1 FOR UPDATE"
    } else {
        "SELECT json_schema, description, compatibility, latest_version FROM highwater.event_types WHERE event_type = $1"
    };
    let Some(row) = sqlx::query(sql).bind(name).fetch_optional(&mut *conn).await? else { return Ok(None) };
    let schema: Option<Json<Value>> = row.try_get("json_schema")?;
    let compatibility: String = row.try_get("compatibility")?;
    let rows: Vec<(i32, Option<Json<Value>>, Option<String>)> = sqlx::query_as(
        "SELECT version, json_schema, upcast FROM highwater.event_type_versions WHERE event_type = $1 ORDER BY version",
    )
    .bind(name)
    .fetch_all(&mut *conn)
    .await?;
    let mut versions: Vec<Version> = rows
        .into_iter()
        .map(|(version, schema, upcast)| Version { version, schema: schema.map(|j| j.0), upcast })
        .collect();
    if versions.is_empty() {
        // Registered by a binary that knows no versions: version 1 is the registry row's schema.
        versions.push(Version { version: 1, schema: schema.map(|j| j.0), upcast: None });
    }
    let aliases: Vec<String> =
        sqlx::query_scalar("SELECT alias FROM highwater.event_type_aliases WHERE event_type = $1 ORDER BY alias")
            .bind(name)
            .fetch_all(&mut *conn)
            .await?;
    let alias_of: Option<String> =
        sqlx::query_scalar("SELECT event_type FROM highwater.event_type_aliases WHERE alias = $1")
            .bind(name)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(Some(TypeInfo {
        event_type: name.to_owned(),
        description: row.try_get("description")?,
        compatibility: compatibility.parse()?,
        latest: versions.last().map_or(1, |v| v.version),
        versions,
        aliases,
        alias_of,
    }))
}

/// [`read`] with the type's registry row locked FOR UPDATE (in a registration's transaction).
pub(super) async fn read_locked(conn: &mut PgConnection, name: &str) -> Result<Option<TypeInfo>> {
    read(conn, name, true).await
}

/// Every registered type with its versions, by name.
pub async fn list_types(pool: &PgPool) -> Result<Vec<TypeInfo>> {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT event_type FROM highwater.event_types ORDER BY event_type").fetch_all(pool).await?;
    let mut conn = pool.acquire().await?;
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        if let Some(t) = read(&mut conn, &n, false).await? {
            out.push(t);
        }
    }
    Ok(out)
}

fn same_upcast(a: Option<&str>, b: Option<&str>) -> bool {
    a.map(str::trim).filter(|s| !s.is_empty()) == b.map(str::trim).filter(|s| !s.is_empty())
}

/// Registers the versions of `spec` that are missing, in order, in one transaction; idempotent.
///
/// Refused (`Error::Refused` with a fix, nothing changed): a version whose schema or upcast
/// differs from the registered one; versions not numbered 1, 2, … without a gap; a schema that is
/// not a valid JSON Schema (or uses keywords the database does not enforce); an upcast on version
/// 1, not one SQL expression, or failing on a stored event (found by a dry run over the stored
/// events, which also checks that its output fits the new schema); a new version incompatible
/// with the earlier ones under the type's mode (the incompatible paths named); an alias that
/// already names another type.
pub async fn apply_type(pool: &PgPool, spec: &TypeSpec) -> Result<Applied> {
    let mut tx = pool.begin().await?;
    let applied = apply_type_in(&mut tx, spec).await?;
    tx.commit().await?;
    Ok(applied)
}

/// [`apply_type`] inside the caller's transaction (rolled back by the caller on error).
pub async fn apply_type_in(conn: &mut PgConnection, spec: &TypeSpec) -> Result<Applied> {
    let name = spec.event_type.as_str();
    let mut declared: Vec<VersionSpec> = spec.versions.clone();
    if declared.is_empty() {
        declared.push(VersionSpec { version: 1, schema: None, upcast: None });
    }
    declared.sort_by_key(|v| v.version);
    for (i, v) in declared.iter().enumerate() {
        let expected = i32::try_from(i).unwrap_or(i32::MAX).saturating_add(1);
        if v.version != expected {
            return Err(Error::refused(format!(
                "the versions of {name:?} must be numbered 1, 2, 3, … without a gap: version {expected} is missing (got {})",
                declared.iter().map(|v| v.version.to_string()).collect::<Vec<_>>().join(", ")
            ))
            .with_fix(format!("declare version {expected} (every version from 1 on, as registered)")));
        }
        if let Some(s) = &v.schema {
            check_schema(name, s).map_err(|e| prefix(e, &format!("version {} of {name:?}: ", v.version)))?;
        }
        if let Some(u) = &v.upcast {
            if v.version == 1 {
                return Err(Error::refused(format!(
                    "version 1 of {name:?} declares an upcast: there is no version before it"
                ))
                .with_fix("remove the upcast of version 1; an upcast turns a payload of version N-1 into one of N"));
            }
            if u.contains(';') {
                return Err(Error::refused(format!(
                    "the upcast of version {} of {name:?} is not one SQL expression (it contains ';'): {u}",
                    v.version
                ))
                .with_fix(
                    "write a single expression over `payload`, e.g. jsonb_set(payload, '{currency}', '\"EUR\"')",
                ));
            }
        }
    }

    let existing = read(&mut *conn, name, true).await?;
    if let Some(t) = &existing
        && let Some(of) = &t.alias_of
        && declared.len() > t.versions.len()
    {
        return Err(Error::refused(format!("{name:?} is an alias of {of:?}: its versions are those of {of:?}"))
            .with_fix(format!("register versions of {of:?} instead")));
    }
    let registered: Vec<Version> = existing.as_ref().map(|t| t.versions.clone()).unwrap_or_default();
    for (d, r) in declared.iter().zip(&registered) {
        if d.schema != r.schema || !same_upcast(d.upcast.as_deref(), r.upcast.as_deref()) {
            let what = if d.schema != r.schema { "schema" } else { "upcast" };
            let next = registered.len() + 1;
            return Err(Error::refused(format!(
                "version {} of {name:?} is registered with a different {what}: a registered version never changes \
                 (its stored events were checked against it)",
                d.version
            ))
            .with_fix(format!(
                "register the change as version {next} (`highwater event-types register {name} --version {next} --schema FILE`), \
                 or declare version {} as registered (`highwater event-types show {name}`)",
                d.version
            )));
        }
    }

    let mut notes = Vec::new();
    let mut new_versions = Vec::new();
    if existing.is_none() {
        sqlx::query(
            "INSERT INTO highwater.event_types (event_type, json_schema, description, compatibility)
             VALUES ($1, NULL, $2, $3)",
        )
        .bind(name)
        .bind(spec.description.as_deref())
        .bind(spec.compatibility.as_str())
        .execute(&mut *conn)
        .await
        .map_err(|e| map_db(name, e))?;
    }
    // A type registered by an older binary has no version rows: write version 1's.
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.event_type_versions WHERE event_type = $1")
        .bind(name)
        .fetch_one(&mut *conn)
        .await?;
    if rows == 0 && !registered.is_empty() {
        sqlx::query("INSERT INTO highwater.event_type_versions (event_type, version, json_schema) VALUES ($1, 1, $2)")
            .bind(name)
            .bind(registered[0].schema.as_ref().map(Json))
            .execute(&mut *conn)
            .await?;
    }

    let mut known: Vec<Version> = registered.clone();
    for d in declared.iter().skip(registered.len()) {
        if !known.is_empty() {
            check_compatibility(name, spec.compatibility, &known, d, &mut notes)?;
        }
        sqlx::query(
            "INSERT INTO highwater.event_type_versions (event_type, version, json_schema, upcast) VALUES ($1, $2, $3, $4)",
        )
        .bind(name)
        .bind(d.version)
        .bind(d.schema.as_ref().map(Json))
        .bind(d.upcast.as_deref().map(str::trim).filter(|s| !s.is_empty()))
        .execute(&mut *conn)
        .await?;
        if d.upcast.is_some() || (spec.compatibility.backward() && !known.is_empty()) {
            dry_run(&mut *conn, name, d).await?;
        }
        known.push(Version { version: d.version, schema: d.schema.clone(), upcast: d.upcast.clone() });
        new_versions.push(d.version);
    }
    let latest = known.last().map_or(1, |v| v.version);
    let latest_schema = known.last().and_then(|v| v.schema.clone());
    sqlx::query(
        "UPDATE highwater.event_types
            SET json_schema = $2, latest_version = NULLIF($3, 1), compatibility = $4,
                description = coalesce($5, description),
                updated_at = CASE WHEN (json_schema, latest_version, compatibility, description)
                                       IS DISTINCT FROM ($2, NULLIF($3, 1), $4, coalesce($5, description))
                                  THEN now() ELSE updated_at END
          WHERE event_type = $1",
    )
    .bind(name)
    .bind(latest_schema.as_ref().map(Json))
    .bind(latest)
    .bind(spec.compatibility.as_str())
    .bind(spec.description.as_deref())
    .execute(&mut *conn)
    .await?;

    for alias in &spec.aliases {
        add_alias(&mut *conn, alias, name).await?;
    }
    Ok(Applied { registered: new_versions, latest, notes })
}

fn prefix(e: Error, p: &str) -> Error {
    e.in_context(p)
}

/// Records `alias` as a former name of `target` (registering it without a schema if missing).
async fn add_alias(conn: &mut PgConnection, alias: &str, target: &str) -> Result<()> {
    if alias == target {
        return Err(
            Error::refused(format!("{alias:?} cannot be an alias of itself")).with_fix("remove it from the aliases")
        );
    }
    let current: Option<String> =
        sqlx::query_scalar("SELECT event_type FROM highwater.event_type_aliases WHERE alias = $1")
            .bind(alias)
            .fetch_optional(&mut *conn)
            .await?;
    match current {
        Some(t) if t == target => return Ok(()),
        Some(t) => {
            return Err(Error::refused(format!("{alias:?} is already an alias of {t:?}"))
                .with_fix(format!("remove {alias:?} from the aliases of {target:?}, or rename {t:?} instead")));
        }
        None => {}
    }
    let has_aliases: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT FROM highwater.event_type_aliases WHERE event_type = $1)")
            .bind(alias)
            .fetch_one(&mut *conn)
            .await?;
    if has_aliases {
        // Chains are flattened: the former names of the former name are former names of the target.
        sqlx::query("UPDATE highwater.event_type_aliases SET event_type = $2 WHERE event_type = $1")
            .bind(alias)
            .bind(target)
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query("INSERT INTO highwater.event_types (event_type) VALUES ($1) ON CONFLICT (event_type) DO NOTHING")
        .bind(alias)
        .execute(&mut *conn)
        .await
        .map_err(|e| map_db(alias, e))?;
    sqlx::query("INSERT INTO highwater.event_type_aliases (alias, event_type) VALUES ($1, $2)")
        .bind(alias)
        .bind(target)
        .execute(&mut *conn)
        .await?;
    // Consumers of the target read the alias's events from now on: their rows say so (status,
    // applied) and their dispatchers reload (they expand the spec's types on load).
    let consumers: Vec<String> = sqlx::query_scalar(
        "UPDATE highwater.consumers SET event_types = event_types || $1::text
          WHERE $2 = ANY (event_types) AND NOT $1 = ANY (event_types) RETURNING name",
    )
    .bind(alias)
    .bind(target)
    .fetch_all(&mut *conn)
    .await?;
    for c in consumers {
        crate::notify::control(&mut *conn, &c).await?;
    }
    Ok(())
}

/// The static check of a new version against the registered ones under `mode`.
fn check_compatibility(
    name: &str,
    mode: Compatibility,
    known: &[Version],
    new: &VersionSpec,
    notes: &mut Vec<String>,
) -> Result<()> {
    if mode == Compatibility::None {
        return Ok(());
    }
    let older: &[Version] = if mode.transitive() { known } else { &known[known.len() - 1..] };
    let mut problems = Vec::new();
    let mut open = Vec::new();
    for o in older {
        if mode.backward() {
            // An upcast on a step between them replaces the static check: the dry run over the
            // stored events proves what it turns them into.
            let upcast_between =
                known.iter().any(|k| k.version > o.version && k.upcast.is_some()) || new.upcast.is_some();
            if !upcast_between {
                for f in compat::check(o.schema.as_ref(), new.schema.as_ref()) {
                    if f.open_content {
                        open.push(format!("version {}: {f}", o.version));
                    } else {
                        problems.push(format!(
                            "backward (stored events of version {} read as {}): {f}",
                            o.version, new.version
                        ));
                    }
                }
            }
        }
        if mode.forward() {
            for f in compat::check(new.schema.as_ref(), o.schema.as_ref()) {
                problems.push(format!(
                    "forward (events of version {} read by consumers of {}): {f}",
                    new.version, o.version
                ));
            }
        }
    }
    if !problems.is_empty() {
        let trap = problems.iter().any(|p| p.contains("open content model"));
        let mut fix = format!(
            "make the change compatible (add properties as optional, widen instead of narrowing), declare an upcast \
             from version {} (`--upcast EXPR`, a SQL expression over payload), or register under another mode \
             (`--compatibility none`)",
            new.version - 1
        );
        if trap {
            fix.push_str(
                "; for the open content model: declare `additionalProperties: false` in the new version, \
                 or keep the removed property declared (with any type it may have held)",
            );
        }
        return Err(Error::refused(format!(
            "version {} of {name:?} is not {mode} compatible:\n  {}",
            new.version,
            problems.join("\n  ")
        ))
        .with_fix(fix));
    }
    if !open.is_empty() {
        notes.push(format!(
            "open content model: {}; a schema without `additionalProperties: false` accepts any value under an \
             undeclared property, so no schema comparison can prove it (registries that compare schemas refuse \
             this, e.g. Confluent #1458). highwater checked every stored event of the earlier versions against \
             version {} instead; events appended later under an earlier version are checked against that version only",
            open.join("; "),
            new.version
        ));
    }
    Ok(())
}

/// The dry run of a new version over the stored events of the earlier ones (read only, in the
/// registration's transaction): each payload through the upcasts up to `new`, then against its
/// schema. Refused naming the first event that fails.
async fn dry_run(conn: &mut PgConnection, name: &str, new: &VersionSpec) -> Result<()> {
    if let Some(u) = &new.upcast {
        // Parse and type-check the expression before running it over events.
        let sql = format!("SELECT ({u})::jsonb FROM (SELECT NULL::jsonb AS payload) AS e LIMIT 0");
        let mut sp = sqlx::Connection::begin(&mut *conn).await?;
        if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *sp).await {
            let msg = e.as_database_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
            return Err(Error::refused(format!(
                "the upcast of version {} of {name:?} is not a SQL expression over payload: {msg}",
                new.version
            ))
            .with_fix("write one expression over `payload` (jsonb) giving the new payload, e.g. jsonb_set(payload, '{currency}', '\"EUR\"')"));
        }
        sp.commit().await?;
    }
    let failed: Option<(i64, i32, String)> =
        sqlx::query_as("SELECT event_id, from_version, problem FROM highwater.event_type_dry_run($1, $2)")
            .bind(name)
            .bind(new.version)
            .fetch_optional(&mut *conn)
            .await?;
    if let Some((id, from, problem)) = failed {
        let how = if new.upcast.is_some() { "through the upcasts" } else { "as stored" };
        return Err(Error::refused(format!(
            "version {} of {name:?} cannot read stored event {id} (version {from}) {how}: {problem}",
            new.version
        ))
        .with_fix(format!(
            "fix the upcast or the schema of version {} so that event {id} fits (`highwater events read` shows it), \
             or register under `--compatibility none` without an upcast",
            new.version
        )));
    }
    Ok(())
}

/// Stored events of `event_type` (as stored: not its aliases) per schema version, every
/// registered version listed (0 events included).
pub async fn version_counts(pool: &PgPool, event_type: &str) -> Result<Vec<VersionCount>> {
    Ok(sqlx::query_as(
        "SELECT v.version, coalesce(c.events, 0)::int8 AS events
           FROM (SELECT version FROM highwater.event_type_versions WHERE event_type = $1
                 UNION SELECT 1 FROM highwater.event_types WHERE event_type = $1) v
           LEFT JOIN (SELECT coalesce(schema_version, 1) AS version, count(*) AS events
                        FROM highwater.events WHERE event_type = $1 GROUP BY 1) c USING (version)
          ORDER BY v.version",
    )
    .bind(event_type)
    .fetch_all(pool)
    .await?)
}

/// Registers `alias` (the old name, usually with stored events) as a former name of `target`,
/// which is registered with the old name's versions and mode when missing.
pub async fn rename(pool: &PgPool, old: &str, new: &str) -> Result<Applied> {
    let mut tx = pool.begin().await?;
    let Some(from) = read(&mut tx, old, true).await? else {
        return Err(Error::refused(format!("event type {old:?} is not registered"))
            .with_fix("`highwater event-types list` shows the registered types"));
    };
    if let Some(of) = &from.alias_of {
        return Err(
            Error::refused(format!("{old:?} is already an alias of {of:?}")).with_fix(format!("rename {of:?} instead"))
        );
    }
    let mut spec = match read(&mut tx, new, false).await? {
        Some(t) => t.spec(),
        None => TypeSpec { event_type: new.to_owned(), ..from.spec() },
    };
    spec.aliases = vec![old.to_owned()];
    let applied = apply_type_in(&mut tx, &spec).await?;
    tx.commit().await?;
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn version(n: i32, schema: Value, upcast: Option<&str>) -> Version {
        Version { version: n, schema: Some(schema), upcast: upcast.map(str::to_owned) }
    }

    fn closed(props: Value, required: &[&str]) -> Value {
        json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
    }

    /// Registered 1 and 2, each pair checked by every mode: Ok, or refused (naming a path).
    #[test]
    fn each_mode_checks_its_direction_and_its_range() {
        let a = json!({"a": {"type": "string"}});
        let ab = json!({"a": {"type": "string"}, "b": {"type": "string"}});
        // 1: {a, b}, 2: {a}, both closed (additionalProperties false); 3 is the candidate.
        let v1 = version(1, closed(ab.clone(), &[]), None);
        let v2 = version(2, closed(a.clone(), &[]), None);
        let cases: Vec<(&str, VersionSpec, [bool; 7])> = vec![
            // Adds optional b to a closed schema: backward holds (2's payloads have no b, 1's
            // may have a string b), forward fails (a consumer of 2 refuses 3's b).
            (
                "optional b added back",
                VersionSpec { version: 3, schema: Some(closed(ab.clone(), &[])), upcast: None },
                // backward, backward_t, forward, forward_t, full, full_t, none
                [true, true, false, false, false, false, true],
            ),
            (
                "b added back as required",
                VersionSpec { version: 3, schema: Some(closed(ab.clone(), &["b"])), upcast: None },
                [false, false, false, false, false, false, true],
            ),
            (
                "b required with an upcast (backward is the dry run's)",
                VersionSpec {
                    version: 3,
                    schema: Some(closed(ab.clone(), &["b"])),
                    upcast: Some("payload || '{\"b\": \"x\"}'".into()),
                },
                [true, true, false, false, false, false, true],
            ),
            (
                "same as 2",
                VersionSpec { version: 3, schema: Some(closed(a.clone(), &[])), upcast: None },
                // Backward transitive: 1's payloads may hold b, which 3 refuses.
                [true, false, true, true, true, false, true],
            ),
        ];
        for (name, new, expected) in cases {
            for (mode, ok) in Compatibility::ALL.into_iter().zip(expected) {
                let mut notes = Vec::new();
                let r = check_compatibility("T", mode, &[v1.clone(), v2.clone()], &new, &mut notes);
                assert_eq!(r.is_ok(), ok, "{name} under {mode}: {r:?}");
                if let Err(Error::Refused(r)) = r {
                    assert!(r.problem.contains("$."), "{name} under {mode} names a path: {}", r.problem);
                    assert!(r.fix.is_some());
                }
            }
        }
    }

    #[test]
    fn modes_parse_in_every_spelling() {
        for s in ["backward_transitive", "backward-transitive", "BACKWARD_TRANSITIVE", "BackwardTransitive"] {
            assert_eq!(s.parse::<Compatibility>().unwrap(), Compatibility::BackwardTransitive);
        }
        assert!("sideways".parse::<Compatibility>().is_err());
        assert_eq!(serde_json::to_value(Compatibility::FullTransitive).unwrap(), json!("full_transitive"));
    }
}
