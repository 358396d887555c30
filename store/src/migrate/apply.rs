//! One attempt of `migrate`: everything in one transaction, or nothing.
use std::{sync::Mutex, time::Duration};

use sqlx::{Acquire, PgConnection, PgPool, Row};

use super::{Options, Plan, Report, blockers, checksums, window};
use crate::{Error, Result};

/// Serialises concurrent `migrate`s (transaction-scoped, so it is released with the transaction
/// and works through a transaction-mode pooler): "highwater" in ASCII.
const MIGRATE_LOCK: i64 = 0x6869_6768_7761_7465;

/// `holders` collects who held the locks of an attempt that gave way (see [`blockers`]).
pub async fn once(pool: &PgPool, plan: &Plan, opts: &Options, holders: &Mutex<Vec<String>>) -> Result<Report> {
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    // Wait for another migrate without a timeout (it blocks no writer), then cap every lock wait.
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(MIGRATE_LOCK).execute(&mut *tx).await?;
    let lock_timeout_ms = i64::try_from(opts.lock_timeout.as_millis()).unwrap_or(i64::MAX).max(1);
    sqlx::query("SELECT set_config('lock_timeout', $1, true)")
        .bind(format!("{lock_timeout_ms}ms"))
        .execute(&mut *tx)
        .await?;

    ensure_bookkeeping(&mut tx).await?;
    let applied = applied(&mut tx).await?;
    let mut report = Report::default();

    let recorded = window::read(&mut tx).await?;
    refuse_newer_schema(plan, &applied, recorded.as_ref())?;
    for (version, checksum) in &applied {
        let Some(step) = plan.steps.iter().find(|s| s.version == *version) else { continue };
        if step.checksum == *checksum {
            continue;
        }
        if !checksums::released(*version, checksum) {
            return Err(Error::refused(format!(
                "migration {version} ({}) was applied from a text that no release of highwater had: the schema was \
                 migrated by a modified build",
                step.description
            ))
            .with_fix("migrate with the build that applied it, or restore the database from before it"));
        }
        sqlx::query("UPDATE highwater._sqlx_migrations SET checksum = $2 WHERE version = $1")
            .bind(version)
            .bind(&step.checksum)
            .execute(&mut *tx)
            .await?;
        report.rewritten.push(*version);
    }

    let pending: Vec<_> = plan.steps.iter().filter(|s| !applied.iter().any(|(v, _)| *v == s.version)).collect();
    if !opts.force {
        refuse_breaking_while_older_alive(&mut tx, &pending).await?;
    }
    let sum = plan.definitions_checksum();
    let definitions_changed = recorded.as_ref().map(|r| r.definitions_checksum.as_slice()) != Some(sum.as_slice());
    if !pending.is_empty() || definitions_changed {
        let events_first = applied.iter().any(|(v, _)| *v >= ONE_STATEMENT_APPEND);
        lock_everything(pool, &mut tx, opts, events_first, holders).await?;
    }
    for step in &pending {
        let started = std::time::Instant::now();
        sqlx::raw_sql(sqlx::AssertSqlSafe(step.sql.clone()))
            .execute(&mut *tx)
            .await
            .map_err(|e| in_step(e, &format!("migration {} ({})", step.version, step.description)))?;
        sqlx::query(
            "INSERT INTO highwater._sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES ($1, $2, true, $3, $4)",
        )
        .bind(step.version)
        .bind(&step.description)
        .bind(&step.checksum)
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await?;
        report.applied.push(step.version);
    }

    if !report.applied.is_empty() || definitions_changed {
        for (name, text) in &plan.definitions {
            sqlx::raw_sql(sqlx::AssertSqlSafe(text.clone()))
                .execute(&mut *tx)
                .await
                .map_err(|e| in_step(e, &format!("definition {name} (migrations/definitions/{name}.sql)")))?;
        }
        report.definitions_applied = true;
    }

    sqlx::query(
        "INSERT INTO highwater.schema_version (version, oldest_binary, release, definitions_checksum)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (singleton) DO UPDATE
            SET version = EXCLUDED.version, oldest_binary = EXCLUDED.oldest_binary, release = EXCLUDED.release,
                definitions_checksum = EXCLUDED.definitions_checksum, migrated_at = now()
          WHERE (schema_version.version, schema_version.oldest_binary, schema_version.release,
                 schema_version.definitions_checksum)
                IS DISTINCT FROM (EXCLUDED.version, EXCLUDED.oldest_binary, EXCLUDED.release,
                                  EXCLUDED.definitions_checksum)",
    )
    .bind(plan.schema_version)
    .bind(plan.oldest_binary())
    .bind(&plan.release)
    .bind(&sum)
    .execute(&mut *tx)
    .await?;
    if !report.applied.is_empty() || report.definitions_applied {
        // Running dispatchers reload at commit and check the window again.
        sqlx::query("SELECT pg_notify('highwater_control', 'schema')").execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(report)
}

/// The migration from which the installed `highwater.append` inserts into `events` and reads
/// `event_types` in one statement (20261201000030_append_cost): `events` first. Before it, append
/// read `event_types` in a statement of its own, then inserted.
const ONE_STATEMENT_APPEND: i64 = 20261201000030;

/// Takes, before any change, every lock the migration will need: ACCESS EXCLUSIVE on each table
/// of the schema in the order the running code takes them, so that a holder never waits for a
/// table the migration took before the one it holds. What matters most is the installed
/// `highwater.append` (the database's definition, whatever the applications' release): a
/// business transaction holds what its first append took and wants the rest on its next one, and
/// a transaction that begins while the prelude waits takes append's first table before it queues
/// on the second. So `events` comes first where append takes it first (`events_first`), else
/// `event_types` does; then `stream_versions` (the stream-version trigger, after the insert),
/// `consumer_shards` (a dispatcher's cursor transaction reads `events`, then updates it),
/// `consumers`, and everything else by name. Each of these was seen holding up the prelude, from
/// pg_blocking_pids (see `blockers`), while it was ordered otherwise.
/// Safety does not rest on the order, only progress does (docs/operations.md, "Upgrading", has
/// the retries measured): the whole statement may wait at most
/// `lock_timeout`, and at most half of `deadlock_timeout`: a writer that waits for a lock the
/// migration already holds started waiting after the migration began this statement, so the
/// migration's wait ends first, before PostgreSQL's deadlock check could pick the writer as the
/// victim. After it, no statement of the migration waits for a lock a writer holds.
async fn lock_everything(
    pool: &PgPool,
    tx: &mut PgConnection,
    opts: &Options,
    events_first: bool,
    holders: &Mutex<Vec<String>>,
) -> Result<()> {
    let first: &[&str] = if events_first {
        &["events", "event_types", "stream_versions", "consumer_shards", "consumers"]
    } else {
        &["event_types", "events", "stream_versions", "consumer_shards", "consumers"]
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT format('%I.%I', n.nspname, c.relname)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'highwater' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          ORDER BY array_position($1::text[], c.relname::text) NULLS LAST, c.relname",
    )
    .bind(first)
    .fetch_all(&mut *tx)
    .await?;
    if tables.is_empty() {
        return Ok(());
    }
    let deadlock_ms: f64 = sqlx::query_scalar(
        "SELECT setting::float8 * CASE unit WHEN 's' THEN 1000 ELSE 1 END FROM pg_settings WHERE name = 'deadlock_timeout'",
    )
    .fetch_one(&mut *tx)
    .await?;
    let cap_ms = (opts.lock_timeout.as_secs_f64() * 1000.0).min(deadlock_ms / 2.0).max(1.0);
    let started = std::time::Instant::now();
    sqlx::query("SELECT set_config('statement_timeout', $1, true)")
        .bind(format!("{}ms", cap_ms.round()))
        .execute(&mut *tx)
        .await?;
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *tx).await?;
    let watch = blockers::Watch::start(pool, pid, Duration::from_secs_f64(cap_ms * 0.8 / 1000.0));
    let locked =
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", tables.join(", "))))
            .execute(&mut *tx)
            .await;
    if let Err(e) = locked {
        if let Some(held_by) = watch.finish().await {
            tracing::warn!(%held_by, waited = ?started.elapsed(), "migration's locks are held by running transactions");
            holders.lock().unwrap_or_else(|p| p.into_inner()).push(held_by);
        }
        return Err(e.into());
    }
    watch.stop();
    sqlx::raw_sql("SET LOCAL statement_timeout TO DEFAULT").execute(&mut *tx).await?;
    tracing::info!(tables = tables.len(), waited = ?started.elapsed(), "migration holds its locks");
    Ok(())
}

/// sqlx's bookkeeping table, in sqlx's shape, so earlier releases read it as they always did.
async fn ensure_bookkeeping(tx: &mut PgConnection) -> Result<()> {
    let have_schema: bool =
        sqlx::query_scalar("SELECT to_regnamespace('highwater') IS NOT NULL").fetch_one(&mut *tx).await?;
    if !have_schema {
        sqlx::query("CREATE SCHEMA highwater").execute(&mut *tx).await?;
    }
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS highwater._sqlx_migrations (
             version BIGINT PRIMARY KEY,
             description TEXT NOT NULL,
             installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
             success BOOLEAN NOT NULL,
             checksum BYTEA NOT NULL,
             execution_time BIGINT NOT NULL
         )",
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

async fn applied(tx: &mut PgConnection) -> Result<Vec<(i64, Vec<u8>)>> {
    let rows = sqlx::query("SELECT version, checksum, success FROM highwater._sqlx_migrations ORDER BY version")
        .fetch_all(&mut *tx)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let (version, success): (i64, bool) = (r.get(0), r.get(2));
        if !success {
            return Err(Error::refused(format!("migration {version} is recorded as failed half-way (by an earlier release)"))
                .with_fix("restore the database from before it, or repair the schema by hand and delete its row from highwater._sqlx_migrations"));
        }
        out.push((version, r.get(1)));
    }
    Ok(out)
}

/// A schema migrated by a newer release: this `migrate` must not touch it.
fn refuse_newer_schema(plan: &Plan, applied: &[(i64, Vec<u8>)], recorded: Option<&window::Recorded>) -> Result<()> {
    let unknown: Vec<i64> =
        applied.iter().map(|(v, _)| *v).filter(|v| !plan.steps.iter().any(|s| s.version == *v)).collect();
    let newer = recorded.is_some_and(|r| r.version > plan.schema_version);
    if unknown.is_empty() && !newer {
        return Ok(());
    }
    let by = recorded.map_or_else(
        || "a newer release".to_owned(),
        |r| format!("release {} (schema version {})", r.release, r.version),
    );
    Err(Error::refused(format!(
        "the schema was migrated by {by}, newer than this binary (release {}, schema version {}); migrations unknown \
         here: {unknown:?}",
        plan.release, plan.schema_version
    ))
    .with_fix("run `highwater migrate` of that release or newer; a release never migrates a schema back (CHANGELOG.md, rollback)"))
}

/// A breaking step is refused while a dispatcher older than it is alive (heartbeat in the last
/// minute). A dispatcher that records no binary version predates the window (schema ≤ 2).
async fn refuse_breaking_while_older_alive(tx: &mut PgConnection, pending: &[&super::Step]) -> Result<()> {
    let Some((step, floor)) = pending.iter().filter_map(|s| s.breaking.map(|b| (s, b))).max_by_key(|(_, b)| *b) else {
        return Ok(());
    };
    let has_table: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('highwater.dispatchers')
                          AND attname = 'binary_schema' AND NOT attisdropped)",
    )
    .fetch_one(&mut *tx)
    .await?;
    let older: Vec<(String, Option<i32>)> = if has_table {
        sqlx::query_as(
            "SELECT instance_id, binary_schema FROM highwater.dispatchers
              WHERE heartbeat_at > now() - interval '1 minute' AND coalesce(binary_schema, 2) < $1
              ORDER BY instance_id",
        )
        .bind(floor)
        .fetch_all(&mut *tx)
        .await?
    } else {
        Vec::new()
    };
    if older.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = older
        .iter()
        .map(|(i, v)| match v {
            Some(v) => format!("{i} (schema {v})"),
            None => format!("{i} (before 0.3.0)"),
        })
        .collect();
    Err(Error::refused(format!(
        "migration {} ({}) is breaking: binaries older than schema version {floor} stop working after it, and these \
         dispatchers are alive: {}",
        step.version,
        step.description,
        names.join(", ")
    ))
    .with_fix(format!(
        "replace them with this release first (the previous release's migrate runs without the breaking step), or pass \
         --force to migrate anyway (they exit when they see the schema; nothing is lost, delivery pauses) — \
         window: {}",
        window::RELEASE
    )))
}

fn in_step(e: sqlx::Error, what: &str) -> Error {
    // A lock conflict stays a database error so that the retry sees it. A statement timeout
    // inside a step is not one (only the lock prelude's own cap is): retrying would redo the work.
    if e.as_database_error().and_then(|d| d.code()).is_some_and(|c| matches!(c.as_ref(), "55P03" | "40P01")) {
        tracing::info!(step = what, "lock not free within lock_timeout");
        return Error::Database(e);
    }
    Error::refused(format!("while applying {what}: {e}"))
        .with_fix("nothing was changed (migrate runs in one transaction); fix the cause and run it again")
}
