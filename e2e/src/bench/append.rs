//! Scenario 3, append overhead: pgbench clients write one event per transaction, the same rows
//! three ways: through `highwater.append` (type check, metadata, `xid8` column, indexes,
//! NOTIFY trigger), as a plain INSERT into `highwater.events` (the table's own cost), and as a
//! plain INSERT into a table of the same columns with only a primary key (no `xid8`, no extra
//! index, no trigger), and as the outbox insert an application writes by hand (id, aggregate
//! id, type, payload, created_at, a primary key and a created_at index). No dispatcher runs, so
//! no writer notifies (a busy dispatcher's case); the append is measured once more with a
//! dispatcher asleep, when every commit sends its NOTIFY.
use anyhow::Result;

use super::{BenchDb, Report, Sizes, bound, report::per_s};

const S: &str = "3 append";

const PLAIN_TABLE: &str = "CREATE TABLE bench_plain (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, stream_type text NOT NULL, stream_id text NOT NULL,
    stream_version bigint, event_type text NOT NULL, tenant_id text, payload jsonb NOT NULL,
    metadata jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp())";

const OUTBOX_TABLE: &str = "CREATE TABLE bench_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, aggregate_id text NOT NULL, type text NOT NULL,
    payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
    CREATE INDEX bench_outbox_created_at ON bench_outbox (created_at)";

/// How many turns each statement takes (fewer when the scenario is shorter than this in seconds).
const ROUNDS: u64 = 3;

const PAYLOAD: &str = r#"'{"order_id": 1, "amount": 42, "currency": "EUR"}'::jsonb"#;

fn scripts() -> [(&'static str, String); 4] {
    let meta = "jsonb_build_object('correlation_id', gen_random_uuid()::text)";
    [
        (
            "append API (highwater.append)",
            format!("SELECT highwater.append('order', 'o-' || :client_id, 'OrderPlaced', {PAYLOAD});\n"),
        ),
        (
            "INSERT INTO highwater.events",
            format!(
                "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload, metadata) \
                 VALUES ('order', 'o-' || :client_id, 'OrderPlaced', {PAYLOAD}, {meta});\n"
            ),
        ),
        (
            "plain INSERT (table without xid8, index, trigger)",
            format!(
                "INSERT INTO bench_plain (stream_type, stream_id, event_type, payload, metadata) \
                 VALUES ('order', 'o-' || :client_id, 'OrderPlaced', {PAYLOAD}, {meta});\n"
            ),
        ),
        (
            "outbox INSERT (hand-written outbox table)",
            format!(
                "INSERT INTO bench_outbox (aggregate_id, type, payload) \
                 VALUES ('o-' || :client_id, 'OrderPlaced', {PAYLOAD});\n"
            ),
        ),
    ]
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let db = bench.scenario("append").await?;
    sqlx::query(PLAIN_TABLE).execute(&db.pool).await?;
    sqlx::raw_sql(OUTBOX_TABLE).execute(&db.pool).await?;
    let dir = tempfile::tempdir()?;
    let c = sizes.append_clients.to_string();
    let total = sizes.append_duration.as_secs().max(1);
    // The statements take turns, ROUNDS slices each, so that a host whose speed drifts during the
    // scenario moves all four alike: the ratios are the figures that count, and one statement
    // run after another for the whole duration put the drift into them.
    let rounds = total.clamp(1, ROUNDS);
    let slice = (total / rounds).to_string();
    let secs = (total / rounds) * rounds;
    // Events per second of `script` under the scenario's pgbench clients, for one slice.
    let run = |name: &str, script: &str| -> Result<f64> {
        let path = dir.path().join(format!("{name}.sql"));
        std::fs::write(&path, script)?;
        let out = bound::pgbench(
            bench.pg.port(),
            "append",
            &["-n", "-M", "prepared", "-c", &c, "-j", "2", "-T", &slice, "-f", &path.to_string_lossy()],
        )?;
        bound::tps(&out)
    };
    let scripts = scripts();
    let mut sums = [0.0; 4];
    for _ in 0..rounds {
        for (i, (_, script)) in scripts.iter().enumerate() {
            sums[i] += run(&format!("append-{i}"), script)?;
        }
    }
    // Slices of equal length: the mean of their rates is the rate over the whole time.
    let rates = sums.map(|s| s / rounds as f64);
    for ((label, _), tps) in scripts.iter().zip(rates) {
        let note = format!("{c} pgbench clients, one event per transaction, {secs} s in {rounds} slices taking turns");
        report.add(S, label, "events/s", per_s(tps), note);
    }
    let overhead = |other: f64| format!("{:+.1} %", (other / rates[0] - 1.0) * 100.0);
    let times = |other: f64| format!("{:.2}×", other / rates[0]);
    report.add(S, "append API vs plain INSERT", "time per event, extra", overhead(rates[2]), "");
    report.add(
        S,
        "append API vs INSERT INTO highwater.events",
        "time per event",
        times(rates[1]),
        "the function's checks alone; goal ≤ 1.20×",
    );
    report.add(S, "append API vs outbox INSERT", "time per event", times(rates[3]), "goal ≤ 1.60×");

    // No dispatcher runs above, so nobody sleeps and no writer notifies: the figures of a busy
    // dispatcher. The same append again with a dispatcher asleep (a sleep mark with a running
    // lease), when every commit notifies and takes the notify lock.
    sqlx::query("INSERT INTO highwater.sleepers VALUES ('bench-sleeper', now() + interval '1 hour')")
        .execute(&db.pool)
        .await?;
    let asleep = run("append-asleep", &scripts[0].1)?;
    let note = format!(
        "{c} pgbench clients, one event per transaction, {slice} s after the others; a dispatcher asleep: every commit notifies"
    );
    report.add(S, "append API (highwater.append), NOTIFY sent", "events/s", per_s(asleep), note);
    report.add(S, "append API, NOTIFY sent vs not", "time per event", format!("{:.2}×", rates[0] / asleep), "");
    Ok(())
}
