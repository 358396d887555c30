//! `highwater quickstart`: the whole system on one machine in under a minute.
use std::{
    io::IsTerminal,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use clap::Args;
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use serde_json::json;
use tokio::process::{Child, Command};

use crate::{
    Error, NewEvent, Result, db, definitions,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    event_types, ops,
};

#[derive(Args, Debug, Clone)]
pub struct QuickstartArgs {
    /// Dispatcher processes to run.
    #[arg(long, default_value_t = 3)]
    pub instances: usize,
    /// Sample events to append.
    #[arg(long, default_value_t = 300)]
    pub events: usize,
    /// How long the writers take to append them.
    #[arg(long, default_value = "8s", value_parser = humantime::parse_duration)]
    pub write_for: Duration,
    /// Keep the database and the dispatchers running after the demo, for trying the CLI
    /// (`highwater consumer top`, `events append`, …) and the /metrics endpoints; Ctrl-C stops.
    #[arg(long)]
    pub keep: bool,
}

const EXAMPLES: &[(&str, &str)] = &[
    ("examples/order-projection.yaml", include_str!("../../../examples/order-projection.yaml")),
    ("examples/order-audit-log.yaml", include_str!("../../../examples/order-audit-log.yaml")),
    ("examples/cache-invalidation.yaml", include_str!("../../../examples/cache-invalidation.yaml")),
];

pub async fn run(database_url: Option<String>, a: QuickstartArgs) -> Result<()> {
    let embedded = match database_url {
        Some(_) => None,
        None => {
            println!("DATABASE_URL is not set: starting an embedded PostgreSQL ...");
            let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await?;
            println!("  PostgreSQL listening on 127.0.0.1:{} (removed when the quickstart ends)", pg.port());
            Some(pg)
        }
    };
    let url = database_url.unwrap_or_else(|| embedded.as_ref().expect("started").url());
    let result = scenario(&url, &a).await;
    drop(embedded);
    result
}

async fn scenario(url: &str, a: &QuickstartArgs) -> Result<()> {
    let pool = db::connect(url, 8).await?;
    db::migrate(&pool).await?;
    println!("schema migrated on {}", db::describe_target(url));
    highwater_store::quickstart::create_example_schema(&pool).await?;
    for (name, schema) in [
        ("OrderPlaced", include_str!("../../../examples/event-types/OrderPlaced.schema.json")),
        ("OrderCancelled", include_str!("../../../examples/event-types/OrderCancelled.schema.json")),
    ] {
        let schema: serde_json::Value = serde_json::from_str(schema)?;
        event_types::register(&pool, name, Some(&schema), None).await?;
    }
    let mut defs = Vec::new();
    for (path, text) in EXAMPLES {
        defs.extend(definitions::parse(text, &format!("file:{path}"))?);
    }
    for (name, _) in definitions::apply(&pool, &defs).await? {
        println!("eventconsumer/{name} applied");
    }

    let logs = tempfile::Builder::new().prefix("highwater-quickstart-").tempdir().map_err(Error::io("temp dir"))?;
    let exe = std::env::current_exe().map_err(Error::io("locating the highwater binary"))?;
    let mut children = Vec::new();
    let mut ports = Vec::new();
    for i in 0..a.instances {
        let (child, port) = spawn_dispatcher(&exe, url, &format!("quickstart-{i}"), logs.path())?;
        children.push(child);
        ports.push(port);
    }
    println!("{} dispatcher processes starting (logs in {})", a.instances, logs.path().display());
    // Per-instance consumers start at the head when their process registers its shard: wait for
    // every process, or events appended before it registered are (rightly) not its to deliver.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let registered = highwater_store::quickstart::shards_of(&pool, "cache-invalidation").await?;
        if registered as usize >= a.instances {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::refused("dispatchers did not register within 60s; see their logs"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("all dispatchers registered; appending {} events\n", a.events);

    let writer = tokio::spawn(write_events(pool.clone(), a.events, a.write_for));
    let interrupted = crate::shutdown::shutdown_signal();
    let started = Instant::now();
    let tty = std::io::stdout().is_terminal();
    let mut writer_done = false;
    let mut written = 0;
    let outcome = loop {
        tokio::select! {
            _ = interrupted.cancelled() => break Err(Error::refused("interrupted")),
            _ = tokio::time::sleep(Duration::from_millis(1000)) => {}
        }
        if !writer_done && writer.is_finished() {
            writer_done = true;
        }
        let rows = ops::status(&pool, None).await?;
        if tty {
            print!("\x1b[2J\x1b[H");
        }
        println!(
            "t={:>4.1}s  writers {}",
            started.elapsed().as_secs_f64(),
            if writer_done { "done" } else { "appending" }
        );
        print!("{}", crate::render::render_table(&rows));
        println!();
        if writer_done && rows.iter().all(|r| r.lag_events == 0) {
            break Ok(());
        }
        if started.elapsed() > a.write_for + Duration::from_secs(90) {
            break Err(Error::refused("events were still undelivered 90 s after the writers finished"));
        }
    };
    if writer_done {
        written = writer.await??;
    } else {
        writer.abort();
    }
    // Checked before --keep hands the system over to the person trying it.
    let checked = match &outcome {
        Ok(()) => Some(summary(&pool, logs.path(), written, a.instances).await),
        Err(_) => None,
    };
    if a.keep && outcome.is_ok() {
        println!("The system keeps running. In another terminal:\n");
        println!("  export DATABASE_URL={url}");
        println!("  highwater consumer top");
        println!("  highwater events append --stream-type order --stream-id 7 --type OrderPlaced \\");
        println!("      --payload '{{\"order_id\": \"7\", \"total\": 12.5}}'");
        for (i, p) in ports.iter().enumerate() {
            println!("  curl http://127.0.0.1:{p}/metrics     # quickstart-{i}");
        }
        println!("\nCtrl-C stops everything and removes the database.");
        interrupted.cancelled().await;
    }

    println!("stopping dispatchers (SIGTERM) ...");
    for c in &mut children {
        if let Some(pid) = c.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
    }
    for c in &mut children {
        match tokio::time::timeout(Duration::from_secs(20), c.wait()).await {
            Ok(Ok(s)) if s.success() => {}
            Ok(Ok(s)) => println!("  a dispatcher exited with {s}"),
            _ => {
                let _ = c.kill().await;
                println!("  a dispatcher did not stop within 20s and was killed");
            }
        }
    }
    outcome?;
    checked.expect("checked when the outcome is Ok")
}

fn spawn_dispatcher(exe: &Path, url: &str, instance: &str, logs: &Path) -> Result<(Child, u16)> {
    let out = std::fs::File::create(logs.join(format!("{instance}.out"))).map_err(Error::io("log file"))?;
    let err = std::fs::File::create(logs.join(format!("{instance}.err"))).map_err(Error::io("log file"))?;
    let port = crate::embedded::free_port()?;
    let listen = format!("127.0.0.1:{port}");
    Command::new(exe)
        .args(["dispatch", "--instance-id", instance, "--listen", &listen])
        .env("DATABASE_URL", url)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .map(|c| (c, port))
        .map_err(Error::io("starting a dispatcher"))
}

/// Four writers, each appending a few events per transaction and sometimes sitting on the
/// transaction before committing, so commits land out of id order as in a real application.
async fn write_events(pool: sqlx::PgPool, total: usize, spread: Duration) -> Result<usize> {
    const WRITERS: usize = 4;
    let per_tx = 3;
    let txs = total.div_ceil(per_tx);
    let pause = spread / (txs.max(1) as u32) * WRITERS as u32;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            let mut t = w;
            while t < txs {
                let mut tx = pool.begin().await?;
                for k in 0..per_tx {
                    let seq = t * per_tx + k;
                    if seq >= total {
                        break;
                    }
                    let order = format!("order-{}", seq % 97);
                    let ev = if seq % 10 == 9 {
                        NewEvent::new(
                            "order",
                            &order,
                            "OrderCancelled",
                            json!({"order_id": order, "reason": "changed mind"}),
                        )
                    } else {
                        NewEvent::new(
                            "order",
                            &order,
                            "OrderPlaced",
                            json!({"order_id": order, "total": (seq % 50) as f64 + 0.99}),
                        )
                    };
                    crate::append(&mut tx, &ev).await?;
                    n += 1;
                }
                if t % 7 == 0 {
                    tokio::time::sleep(pause * 2).await;
                }
                tx.commit().await?;
                tokio::time::sleep(pause).await;
                t += WRITERS;
            }
            Ok::<usize, Error>(n)
        }));
    }
    let mut written = 0;
    for t in tasks {
        written += t.await??;
    }
    Ok(written)
}

async fn summary(pool: &sqlx::PgPool, logs: &Path, written: usize, instances: usize) -> Result<()> {
    let count = |suffix: &str, consumer: &str| -> usize {
        let needle = format!("\"consumer\":\"{consumer}\"");
        std::fs::read_dir(logs)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
            .map(|e| {
                std::fs::read_to_string(e.path()).unwrap_or_default().lines().filter(|l| l.contains(&needle)).count()
            })
            .sum()
    };
    let audit = count(".out", "order-audit-log");
    let cache = count(".err", "cache-invalidation");
    let highwater_store::quickstart::Projected { orders, last_applied: last, newest_event: max_event } =
        highwater_store::quickstart::projected(pool).await?;
    println!("\nappended {written} events in concurrent transactions");
    println!("  order-audit-log (Shared, log):           {audit} lines across {instances} processes (one per event)");
    println!("  cache-invalidation (PerInstance, log):   {cache} lines ({} per process)", cache / instances.max(1));
    println!(
        "  order-projection (Shared, SQL):          {orders} orders in order_totals, last event {}",
        last.unwrap_or(0)
    );
    let ok = audit == written && cache == written * instances && last == max_event;
    println!("\n{}", if ok { "every event delivered to every consumer: OK" } else { "MISMATCH: see the logs above" });
    if ok { Ok(()) } else { Err(Error::refused("delivery counts do not match what was appended")) }
}
