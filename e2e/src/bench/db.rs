//! The benchmark's PostgreSQL: one throwaway cluster per run, started with recorded settings,
//! one database per scenario (so scenarios do not see each other's rows), peers in the same
//! cluster.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use highwater::{
    Xid8,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
};
use sqlx::PgPool;

/// The settings printed with every table; `synchronous_commit`, `fsync` and `shared_buffers` are
/// the ones the issue names.
pub const REPORTED: [&str; 6] =
    ["server_version", "synchronous_commit", "fsync", "full_page_writes", "shared_buffers", "max_connections"];

pub struct BenchDb {
    pub pg: EmbeddedPostgres,
}

/// One scenario's database, migrated, with the `OrderPlaced` type registered.
pub struct ScenarioDb {
    pub url: String,
    pub pool: PgPool,
}

impl BenchDb {
    /// Starts the cluster. fsync and synchronous_commit are off (the embedded default: the
    /// cluster is thrown away), so the figures measure CPU and protocol work rather than this
    /// machine's disk; every peer runs under the same settings.
    pub async fn start() -> Result<Self> {
        Self::start_with(&[]).await
    }

    /// [`start`](Self::start) with more settings, e.g. `wal_level=logical` for a peer that reads
    /// the WAL (the relay scenario's Debezium).
    pub async fn start_with(extra: &[(&str, &str)]) -> Result<Self> {
        let mut options = EmbeddedOptions::default();
        options.settings.retain(|(k, _)| k != "max_connections");
        options.settings.extend(
            [
                ("max_connections", "400"),
                ("shared_buffers", "1GB"),
                ("shared_preload_libraries", "pg_stat_statements"),
                ("track_io_timing", "off"),
                ("log_min_messages", "warning"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        options.settings.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let pg = EmbeddedPostgres::start(options).await.context("starting the benchmark's PostgreSQL")?;
        Ok(BenchDb { pg })
    }

    pub async fn settings(&self) -> Result<Vec<(String, String)>> {
        let pool = PgPool::connect(&self.pg.url()).await?;
        let mut out = Vec::new();
        for name in REPORTED {
            let v: String = sqlx::query_scalar("SELECT current_setting($1)").bind(name).fetch_one(&pool).await?;
            out.push((name.to_owned(), v));
        }
        pool.close().await;
        Ok(out)
    }

    /// A new database named `name`, migrated.
    pub async fn scenario(&self, name: &str) -> Result<ScenarioDb> {
        let url = self.pg.create_database(name).await?;
        let pool = highwater::db::connect(&url, 40).await?;
        highwater::db::migrate(&pool).await?;
        highwater::event_types::register(&pool, "OrderPlaced", None, None).await?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(&pool).await?;
        Ok(ScenarioDb { url, pool })
    }
}

impl ScenarioDb {
    /// Appends `n` events in transactions of 10,000 rows with plain INSERTs (the backlog's
    /// shape, not the append path: that one is scenario 3). Returns the highest id.
    pub async fn fill(&self, n: i64) -> Result<i64> {
        self.fill_more(n).await?;
        sqlx::query("VACUUM ANALYZE highwater.events").execute(&self.pool).await?;
        Ok(sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM highwater.events").fetch_one(&self.pool).await?)
    }

    /// [`fill`](Self::fill) without the VACUUM: `n` more events; returns the highest id.
    pub async fn fill_more(&self, n: i64) -> Result<i64> {
        self.fill_more_with(n, "'{}'::jsonb").await
    }

    /// [`fill_more`](Self::fill_more) with more metadata: `extra`, a `jsonb` expression over the
    /// event's number `g`, joins the correlation id.
    pub async fn fill_more_with(&self, n: i64, extra: &'static str) -> Result<i64> {
        let insert = format!(
            "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload, metadata)
             SELECT 'order', 'o-' || (g % 1000), 'OrderPlaced',
                    jsonb_build_object('order_id', g, 'amount', 42, 'currency', 'EUR'),
                    jsonb_build_object('correlation_id', gen_random_uuid()::text) || {extra}
               FROM generate_series($1::bigint, $2::bigint) g"
        );
        let mut from = 1;
        while from <= n {
            let to = (from + 9_999).min(n);
            sqlx::query(sqlx::AssertSqlSafe(insert.as_str())).bind(from).bind(to).execute(&self.pool).await?;
            from = to + 1;
        }
        Ok(sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM highwater.events").fetch_one(&self.pool).await?)
    }

    /// Applies EventConsumer definitions (YAML) as `highwater consumer apply` would.
    pub async fn apply(&self, yaml: &str) -> Result<()> {
        let defs = highwater::definitions::parse(yaml, "bench")?;
        highwater::definitions::apply(&self.pool, &defs).await?;
        Ok(())
    }

    /// What a timeout report needs: the shards' cursors and states, and the sessions of the
    /// whole cluster that hold a transaction id (any of them holds the fence back).
    async fn why_behind(&self, consumers: &[String]) -> String {
        let shards: Vec<(String, String, i64, String, Option<String>)> = sqlx::query_as(
            "SELECT consumer, instance_id, cursor_id, status, last_error FROM highwater.consumer_shards
              WHERE consumer = ANY($1)",
        )
        .bind(consumers)
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default();
        let holders: Vec<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT datname::text, state, left(query, 120) FROM pg_stat_activity
              WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default();
        format!("  shards: {shards:?}\n  sessions holding a transaction id: {holders:?}")
    }

    /// Waits until every shard of `consumers` has passed every event up to `last_id` (all
    /// committed). Positions, not ids: the cursor stops at the newest position `(tx_id, id)`,
    /// whose id can be below `last_id` when concurrent writers took their transaction ids and
    /// their event ids in opposite orders.
    pub async fn wait_caught_up(&self, consumers: &[String], last_id: i64, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        let target: Option<(Xid8, i64)> = sqlx::query_as(
            "SELECT tx_id, id FROM highwater.events WHERE id <= $1 ORDER BY tx_id DESC, id DESC LIMIT 1",
        )
        .bind(last_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some((tx, id)) = target else { return Ok(started.elapsed()) };
        loop {
            let done: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM highwater.consumer_shards
                  WHERE consumer = ANY($1) AND (cursor_tx, cursor_id) >= ($2, $3)",
            )
            .bind(consumers)
            .bind(tx)
            .bind(id)
            .fetch_one(&self.pool)
            .await?;
            if done as usize >= consumers.len() {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                bail!(
                    "{done} of {} consumers reached event {last_id} within {timeout:?}\n{}",
                    consumers.len(),
                    self.why_behind(consumers).await
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An EventConsumer document: a shared consumer of `group` with `sink` (YAML flow mapping).
pub fn consumer_yaml(name: &str, group: &str, batch: i64, sink: &str) -> String {
    format!(
        "---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {name}}}\nspec:\n  \
         delivery: Shared\n  group: {group}\n  batchSize: {batch}\n  sink: {sink}\n"
    )
}

/// The no-op sink: the existing log sink writing to /dev/null (it still serialises each event
/// to a JSON line, as any real external sink would).
pub const NOOP_SINK: &str = "{log: {target: /dev/null}}";

/// The SQL projection sink: one row per event, stamped with the time of delivery.
pub const PROJECTION_TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_projection (
    event_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, delivered_at timestamptz NOT NULL)";
pub const PROJECTION_SINK: &str = "{sql: {statement: \"INSERT INTO public.bench_projection (event_id, created_at, \
                                   delivered_at) VALUES ($2, $9, clock_timestamp())\"}}";

/// The same projection in the set form: one statement per batch over `highwater_batch`.
pub const PROJECTION_SET_TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_projection_set (
    event_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, delivered_at timestamptz NOT NULL)";
pub const PROJECTION_SET_SINK: &str = "{sql: {form: set, statement: \"INSERT INTO public.bench_projection_set \
                                       (event_id, created_at, delivered_at) SELECT id, created_at, clock_timestamp() \
                                       FROM highwater_batch\"}}";
