//! The relay scenario's writes: each event goes to `highwater.events` and to a seed-style
//! `public.outbox` table in the same statement, so both relays see the same events committed in
//! the same transactions; the outbox table comes with the publication and the logical
//! replication slot Debezium reads it through.
use std::time::Duration;

use anyhow::{Result, bail};

use super::db::ScenarioDb;

const OUTBOX_TABLE: &str = "CREATE TABLE public.outbox (
    id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
    payload jsonb NOT NULL)";

/// The outbox table, its publication and the logical replication slot, named `name`. The slot
/// comes first: it keeps every later change for Debezium, as a slot running in production does.
pub async fn prepare_outbox(db: &ScenarioDb, name: &str) -> Result<()> {
    sqlx::query(OUTBOX_TABLE).execute(&db.pool).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE PUBLICATION {name} FOR TABLE public.outbox")))
        .execute(&db.pool)
        .await?;
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')").bind(name).execute(&db.pool).await?;
    Ok(())
}

/// `n` events, each written to both tables by the same statement, 10,000 per transaction.
pub async fn fill_both(db: &ScenarioDb, n: i64) -> Result<()> {
    let mut from = 1;
    while from <= n {
        let to = (from + 9_999).min(n);
        sqlx::query(
            "WITH g AS (SELECT g, jsonb_build_object('order_id', g, 'amount', 42, 'currency', 'EUR') AS payload
                          FROM generate_series($1::bigint, $2::bigint) g),
                  hw AS (INSERT INTO highwater.events (stream_type, stream_id, event_type, payload, metadata)
                         SELECT 'order', 'o-' || (g % 1000), 'OrderPlaced', payload,
                                jsonb_build_object('correlation_id', gen_random_uuid()::text) FROM g)
             INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), 'order', 'o-' || (g % 1000), 'OrderPlaced', payload FROM g",
        )
        .bind(from)
        .bind(to)
        .execute(&db.pool)
        .await?;
        from = to + 1;
    }
    sqlx::query("VACUUM ANALYZE highwater.events").execute(&db.pool).await?;
    sqlx::query("VACUUM ANALYZE public.outbox").execute(&db.pool).await?;
    Ok(())
}

/// One event into both tables in one statement (one transaction): through `highwater.append`
/// and as an outbox row, with the same payload; `stamped` adds the commit time in µs.
pub fn write_both_sql(stamped: bool) -> String {
    let stamp = if stamped { ", 'committed_at_us', (extract(epoch FROM clock_timestamp()) * 1e6)::bigint" } else { "" };
    format!(
        "WITH p AS (SELECT jsonb_build_object('order_id', $2::bigint, 'amount', 42{stamp}) AS payload),
              hw AS (SELECT highwater.append('order', $1, 'OrderPlaced', (SELECT payload FROM p)))
         INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
         SELECT gen_random_uuid(), 'order', $1, 'OrderPlaced', payload FROM p, hw"
    )
}

/// Writes at `rate` events/s from `writers` tasks for `duration`; returns how many were written.
pub async fn write_steadily(url: &str, rate: u32, writers: u32, duration: Duration) -> Result<u64> {
    let url = format!("{url}?options=-c%20synchronous_commit%3Don");
    let pool = highwater::db::connect(&url, writers).await?;
    let check: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&pool).await?;
    if check != "on" {
        bail!("the writers' synchronous_commit is {check}, not on");
    }
    let per_writer = rate / writers;
    let period = Duration::from_secs_f64(1.0 / per_writer as f64);
    let ticks = (duration.as_secs_f64() * per_writer as f64) as u64;
    let sql: std::sync::Arc<str> = write_both_sql(true).into();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for i in 0..ticks {
                tick.tick().await;
                sqlx::query(sqlx::AssertSqlSafe(&*sql))
                    .bind(format!("o-{w}-{i}"))
                    .bind(i as i64)
                    .execute(&pool)
                    .await?;
            }
            anyhow::Ok(ticks)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    pool.close().await;
    Ok(total)
}
