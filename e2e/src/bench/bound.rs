//! The physical bound: highwater's read-batch + cursor-update loop written as plain SQL and run
//! by pgbench on the same events, so what is left is what PostgreSQL itself costs. Per
//! transaction: lock the cursor row, read one batch below the snapshot fence in (tx_id, id)
//! order with every column a sink gets, move the cursor to the batch's last row. The SQL
//! projection bounds do the same with the projection applied in that transaction: per event
//! (a PL/pgSQL loop that sets the three per-event settings and runs the same INSERT, statically
//! prepared) or as one INSERT over the batch.
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::db::ScenarioDb;

const SCRIPT: &str = r#"BEGIN;
SELECT cursor_tx AS ctx, cursor_id AS cid FROM bench_bound_cursor WHERE client = :client_id FOR UPDATE \gset
WITH b AS (
  SELECT id, tx_id, stream_type, stream_id, stream_version, event_type, tenant_id, payload, metadata, created_at
    FROM highwater.events
   WHERE (tx_id, id) > (:ctx::xid8, :cid) AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
   ORDER BY tx_id, id LIMIT :batch),
l AS (SELECT tx_id, id FROM b ORDER BY tx_id DESC, id DESC LIMIT 1),
u AS (UPDATE bench_bound_cursor c SET cursor_tx = l.tx_id, cursor_id = l.id FROM l WHERE c.client = :client_id RETURNING 1)
SELECT b.* FROM b;
COMMIT;
"#;

/// Per-event projection bound: what a hand-written server-side loop costs. The settings are
/// assignments, not PERFORMs (PL/pgSQL evaluates them without an executor), as in the loop
/// `highwater.sql_sink_prepare` generates (migration 20261202000030).
const PER_EVENT_FN: &str = r#"CREATE OR REPLACE FUNCTION bench_bound_per_event(p_client int, p_batch int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE c record; r record; last_tx xid8; last_id bigint; v_set text;
BEGIN
  SELECT cursor_tx, cursor_id INTO c FROM bench_bound_cursor WHERE client = p_client FOR UPDATE;
  FOR r IN SELECT id, tx_id, stream_type, stream_id, stream_version, event_type, tenant_id, payload, metadata, created_at
             FROM highwater.events
            WHERE (tx_id, id) > (c.cursor_tx, c.cursor_id) AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
            ORDER BY tx_id, id LIMIT p_batch LOOP
    v_set := set_config('highwater.tenant_id', coalesce(r.tenant_id, ''), true);
    v_set := set_config('highwater.correlation_id', coalesce(r.metadata ->> 'correlation_id', ''), true);
    v_set := set_config('highwater.causation_id', r.id::text, true);
    INSERT INTO bench_bound_projection (event_id, created_at, delivered_at) VALUES (r.id, r.created_at, clock_timestamp());
    last_tx := r.tx_id; last_id := r.id;
  END LOOP;
  IF last_id IS NOT NULL THEN
    UPDATE bench_bound_cursor SET cursor_tx = last_tx, cursor_id = last_id WHERE client = p_client;
  END IF;
END $$"#;

const PER_EVENT_SCRIPT: &str = "SELECT bench_bound_per_event(:client_id, :batch);\n";

const SET_SCRIPT: &str = r#"BEGIN;
SELECT cursor_tx AS ctx, cursor_id AS cid FROM bench_bound_cursor WHERE client = :client_id FOR UPDATE \gset
WITH b AS (
  SELECT id, tx_id, stream_type, stream_id, stream_version, event_type, tenant_id, payload, metadata, created_at
    FROM highwater.events
   WHERE (tx_id, id) > (:ctx::xid8, :cid) AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
   ORDER BY tx_id, id LIMIT :batch),
i AS (INSERT INTO bench_bound_projection (event_id, created_at, delivered_at) SELECT id, created_at, clock_timestamp() FROM b),
l AS (SELECT tx_id, id FROM b ORDER BY tx_id DESC, id DESC LIMIT 1),
u AS (UPDATE bench_bound_cursor c SET cursor_tx = l.tx_id, cursor_id = l.id FROM l WHERE c.client = :client_id RETURNING 1)
SELECT b.* FROM b;
COMMIT;
"#;

/// Which loop a bound runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loop {
    /// Read and move the cursor: the no-op sink's bound.
    Read,
    /// Read, apply the projection per event, move the cursor, in one transaction.
    ProjectPerEvent,
    /// Read, apply the projection as one statement, move the cursor, in one transaction.
    ProjectSet,
}

/// Drains `events` events `clients` times over (one cursor per client); returns events/s.
pub async fn drain(db: &ScenarioDb, port: u16, events: i64, batch: i64, clients: u32) -> Result<f64> {
    drain_loop(db, port, events, batch, clients, Loop::Read).await
}

/// [`drain`] with the loop `kind`.
pub async fn drain_loop(db: &ScenarioDb, port: u16, events: i64, batch: i64, clients: u32, kind: Loop) -> Result<f64> {
    sqlx::query("DROP TABLE IF EXISTS bench_bound_cursor").execute(&db.pool).await?;
    sqlx::query(
        "CREATE TABLE bench_bound_cursor (client int PRIMARY KEY, cursor_tx xid8 NOT NULL, cursor_id bigint NOT NULL)",
    )
    .execute(&db.pool)
    .await?;
    sqlx::query("INSERT INTO bench_bound_cursor SELECT g, '0'::xid8, 0 FROM generate_series(0, $1 - 1) g")
        .bind(clients as i32)
        .execute(&db.pool)
        .await?;
    if kind != Loop::Read {
        sqlx::query("DROP TABLE IF EXISTS bench_bound_projection").execute(&db.pool).await?;
        sqlx::query(
            "CREATE TABLE bench_bound_projection (event_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, \
             delivered_at timestamptz NOT NULL)",
        )
        .execute(&db.pool)
        .await?;
        sqlx::query(PER_EVENT_FN).execute(&db.pool).await?;
    }
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("drain.sql");
    let text = match kind {
        Loop::Read => SCRIPT,
        Loop::ProjectPerEvent => PER_EVENT_SCRIPT,
        Loop::ProjectSet => SET_SCRIPT,
    };
    std::fs::write(&script, text)?;
    let batches = (events + batch - 1) / batch;
    let dbname = db.url.rsplit('/').next().unwrap_or("postgres").to_owned();
    let out = pgbench(
        port,
        &dbname,
        &[
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients.to_string(),
            "-j",
            &clients.min(2).to_string(),
            "-t",
            &batches.to_string(),
            "-D",
            &format!("batch={batch}"),
            "-f",
            &script.to_string_lossy(),
        ],
    )?;
    let behind: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM bench_bound_cursor
          WHERE (cursor_tx, cursor_id) < (SELECT tx_id, id FROM highwater.events ORDER BY tx_id DESC, id DESC LIMIT 1)",
    )
    .fetch_one(&db.pool)
    .await?;
    if behind > 0 {
        bail!("the pgbench bound left {behind} cursors short of the last event:\n{out}");
    }
    Ok(tps(&out)? * batch as f64)
}

/// Runs pgbench against the benchmark's cluster; returns its stdout.
pub fn pgbench(port: u16, dbname: &str, args: &[&str]) -> Result<String> {
    let bin = highwater::embedded::find_bindir()?.join("pgbench");
    let out = Command::new(&bin)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(args)
        .arg(dbname)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("pgbench failed ({}):\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(stdout)
}

/// The `tps = ...` figure of a pgbench report.
pub fn tps(report: &str) -> Result<f64> {
    report
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no tps in the pgbench report:\n{report}"))
}
