//! Scenario 12, the cost of many consumers (issue 38): one backlog spread evenly over many event
//! types, drained by 1, 10, … consumers that split the types between them (each event delivered
//! once in all while there are no more consumers than types; beyond, each type goes to several
//! consumers). Reported per count: the drain's time, deliveries per second, and PostgreSQL's and
//! the dispatcher's CPU per delivered event, the server's against the one-consumer drain's: how
//! the database's work grows with the number of consumers. Then again over a skewed mix: one hot
//! type with 90% of the events, the other types sharing the rest, so that most consumers have a
//! few events in a long range of the hot type's. The backlog is appended one event a transaction,
//! then again (uniform mix, fewer counts) 3 and 500 events a transaction: a business transaction
//! that emits several events, a bulk import.
use std::time::{Duration, Instant};

use anyhow::Result;
use highwater::{notify::CONTROL_CHANNEL, shards::Status};

use super::{
    BenchDb, Report, Sizes,
    dispatcher::{DispatcherOpts, DispatcherProc},
    report::{per_s, ratio},
    server_cpu::server_cpu,
};

const S: &str = "12 consumers";
const TIMEOUT: Duration = Duration::from_secs(1800);
const SINK: &str = "{sql: {statement: 'INSERT INTO public.bench_fanout (event_id) VALUES ($2)'}}";

/// The types consumer `i` of `n` selects among `types`.
pub(super) fn selected(i: usize, n: usize, types: usize) -> Vec<String> {
    if n <= types { (i..types).step_by(n).map(|t| format!("T{t}")).collect() } else { vec![format!("T{}", i % types)] }
}

/// `n` Shared consumers `c0`, `c1`, … of group `group` that split `types` types between them
/// ([`selected`]), each applying its events with `sink`: their names and their documents.
pub(super) fn split_consumers(n: usize, types: usize, group: &str, batch: i64, sink: &str) -> (Vec<String>, String) {
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let yaml = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            format!(
                "---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {name}}}\nspec:\n  \
                 delivery: Shared\n  group: {group}\n  batchSize: {batch}\n  eventTypes: [{}]\n  sink: {sink}\n",
                selected(i, n, types).join(", ")
            )
        })
        .collect();
    (names, yaml)
}

/// How the backlog's events are spread over the types.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mix {
    Uniform,
    /// T0 gets nine events in ten, the other types share the tenth.
    Skewed,
}

/// The type of event `g` (from 1) as SQL over `g` and `types`, the number of types.
fn type_of(mix: Mix) -> &'static str {
    match mix {
        Mix::Uniform => "'T' || (g % types)",
        Mix::Skewed => "'T' || CASE WHEN g % 10 <> 0 THEN 0 ELSE 1 + (g / 10) % (types - 1) END",
    }
}

/// The backlog as one top-level DO block that commits every `per_tx` events: `events` events in
/// transactions of `per_tx` (the last may be shorter), typed by `mix` over `types` types.
fn backlog(mix: Mix, events: i64, types: usize, per_tx: i64) -> String {
    format!(
        "DO $$ DECLARE types int := {types}; BEGIN
           FOR s IN 0..({events} + {per_tx} - 1) / {per_tx} - 1 LOOP
             INSERT INTO highwater.events (stream_type, stream_id, event_type, payload)
             SELECT 'order', 'o-' || (g % 1000), {}, jsonb_build_object('n', g)
               FROM generate_series(s * {per_tx} + 1, least((s + 1) * {per_tx}, {events})) g;
             COMMIT;
           END LOOP;
         END $$",
        type_of(mix)
    )
}

struct Drained {
    took: Duration,
    delivered: i64,
    server_us: f64,
    dispatcher_us: f64,
    /// The server's CPU for the consumers' apply, per consumer.
    apply_ms_per_consumer: f64,
}

/// `per_consumer`: every consumer runs its own passes (`--per-consumer-pass`), the shape before
/// the group pass, for the comparison.
async fn drain(bench: &BenchDb, sizes: &Sizes, n: usize, mix: Mix, per_tx: i64, per_consumer: bool) -> Result<Drained> {
    let types = sizes.consumers_types;
    let mut name = if mix == Mix::Skewed { format!("consumers_skewed_{n}") } else { format!("consumers_{n}") };
    if per_tx != 1 {
        name = format!("{name}_tx{per_tx}");
    }
    if per_consumer {
        name = format!("{name}_alone");
    }
    let db = bench.scenario(&name).await?;
    for t in 0..types {
        highwater::event_types::register(&db.pool, &format!("T{t}"), None, None).await?;
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(backlog(mix, sizes.consumers_events, types, per_tx))).execute(&db.pool).await?;
    for sql in ["CREATE TABLE bench_fanout (event_id bigint NOT NULL)", "VACUUM ANALYZE highwater.events"] {
        sqlx::raw_sql(sql).execute(&db.pool).await?;
    }
    let last_id: i64 = sqlx::query_scalar("SELECT max(id) FROM highwater.events").fetch_one(&db.pool).await?;
    let (names, yaml) = split_consumers(n, types, "consumers", sizes.batch, SINK);
    // The consumers' apply (each statement checked: parsed, planned, run once in a rolled-back
    // transaction) is paid once per consumer, not per delivery: measured on its own, before any
    // dispatcher runs, and reported beside the drain's cost. So is the dispatcher's start (its
    // loading of the consumers): their shards wait, disabled, until it has started.
    let before = server_cpu(&db.pool).await?;
    db.apply(&yaml).await?;
    let apply = server_cpu(&db.pool).await? - before;
    let held = sqlx::query("UPDATE highwater.consumer_shards SET status = $2 WHERE consumer = ANY($1)")
        .bind(&names)
        .bind(Status::Disabled)
        .execute(&db.pool)
        .await?
        .rows_affected();
    anyhow::ensure!(held == n as u64, "{held} shards of {n} consumers to hold back until the dispatcher runs");
    let opts = DispatcherOpts { per_consumer_pass: per_consumer, ..DispatcherOpts::group("consumers") };
    let d = DispatcherProc::start(&db.url, &name.replace('_', "-"), &opts).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    sqlx::query("SELECT pg_stat_statements_reset()").execute(&db.pool).await?;
    let (server, dispatcher, started) = (server_cpu(&db.pool).await?, d.cpu_ns()?, Instant::now());
    // The drain: every shard enabled in one statement, as `highwater consumer enable` does one
    // consumer's (the dispatcher wakes on the control channel), to the last cursor past the backlog.
    sqlx::query(
        "WITH enabled AS (UPDATE highwater.consumer_shards SET status = $2
                           WHERE consumer = ANY($1) AND status = $3 RETURNING consumer)
         SELECT count(pg_notify($4, consumer)) FROM enabled",
    )
    .bind(&names)
    .bind(Status::Idle)
    .bind(Status::Disabled)
    .bind(CONTROL_CHANNEL)
    .execute(&db.pool)
    .await?;
    db.wait_caught_up(&names, last_id, TIMEOUT).await?;
    let took = started.elapsed();
    let (server, dispatcher) = (server_cpu(&db.pool).await? - server, d.cpu_ns()?.saturating_sub(dispatcher));
    // Where the server's time went: the drain's top-level statements (printed, not reported).
    let top: Vec<(i64, f64, String)> = sqlx::query_as(
        "SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 110)
           FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          ORDER BY total_exec_time DESC LIMIT 6",
    )
    .fetch_all(&db.pool)
    .await?;
    for (calls, ms, query) in top {
        eprintln!("{name}: {calls} calls, {ms:.0} ms: {query}");
    }
    let delivered: i64 = sqlx::query_scalar("SELECT count(*) FROM bench_fanout").fetch_one(&db.pool).await?;
    drop(d);
    db.pool.close().await;
    let per = |t: Duration| t.as_secs_f64() * 1e6 / delivered.max(1) as f64;
    Ok(Drained {
        took,
        delivered,
        server_us: per(server),
        dispatcher_us: per(dispatcher),
        apply_ms_per_consumer: apply.as_secs_f64() * 1e3 / n as f64,
    })
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let mut runs = vec![(Mix::Uniform, &sizes.consumers_counts, 1), (Mix::Skewed, &sizes.consumers_skewed_counts, 1)];
    runs.extend(sizes.consumers_tx_sizes.iter().map(|&k| (Mix::Uniform, &sizes.consumers_tx_counts, k)));
    for (mix, counts, per_tx) in runs {
        let mut one = None;
        // The largest count once more with every consumer on its own passes, beside the group's.
        let largest = counts.iter().copied().max().filter(|&n| n > 1);
        let passes = counts.iter().map(|&n| (n, false)).chain(largest.map(|n| (n, true)));
        for (n, per_consumer) in passes {
            let r = drain(bench, sizes, n, mix, per_tx, per_consumer).await?;
            let subject = format!(
                "{n} consumer{}{}{}{}",
                if n == 1 { "" } else { "s" },
                if mix == Mix::Skewed { ", skewed" } else { "" },
                if per_tx == 1 { String::new() } else { format!(", {per_tx} events/tx") },
                if per_consumer { ", per-consumer passes" } else { "" }
            );
            let note = format!(
                "{} events over {} types{}, {} a transaction, {} deliveries, SQL projection",
                per_s(sizes.consumers_events as f64),
                sizes.consumers_types,
                if mix == Mix::Skewed { " (one with 90%)" } else { "" },
                per_tx,
                per_s(r.delivered as f64)
            );
            report.add(S, &subject, "drain s", format!("{:.2}", r.took.as_secs_f64()), &note);
            report.add(S, &subject, "deliveries/s", per_s(r.delivered as f64 / r.took.as_secs_f64()), "");
            report.add(
                S,
                &subject,
                "server CPU µs/delivery",
                format!("{:.1}", r.server_us),
                "every backend of the cluster",
            );
            report.add(S, &subject, "dispatcher CPU µs/delivery", format!("{:.1}", r.dispatcher_us), "");
            report.add(
                S,
                &subject,
                "apply server CPU ms/consumer",
                format!("{:.2}", r.apply_ms_per_consumer),
                "once per consumer, before the drain: not in the drain's figures",
            );
            let base = *one.get_or_insert(r.server_us);
            report.add(
                S,
                &subject,
                "server CPU vs 1 consumer",
                ratio(r.server_us, base),
                "goal: ≤ 1.5× at 200, ≤ 2× at 1,000, whatever the events a transaction",
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Mix, backlog, selected};

    #[test]
    fn consumers_split_the_types_and_share_them_beyond_one_each() {
        assert_eq!(selected(0, 1, 3), ["T0", "T1", "T2"]);
        assert_eq!(selected(1, 2, 5), ["T1", "T3"]);
        assert_eq!(selected(4, 5, 5), ["T4"]);
        assert_eq!(selected(7, 10, 5), ["T2"]);
    }

    #[test]
    fn the_backlog_commits_every_per_tx_events_and_ends_at_the_last() {
        let sql = backlog(Mix::Uniform, 1000, 20, 3);
        assert!(sql.contains("FOR s IN 0..(1000 + 3 - 1) / 3 - 1 LOOP"), "{sql}");
        assert!(sql.contains("generate_series(s * 3 + 1, least((s + 1) * 3, 1000))"), "{sql}");
        assert!(sql.contains("COMMIT;"), "{sql}");
    }
}
