//! The Debezium peer of the relay scenario: Debezium 3.6.1.Final's embedded engine with the
//! PostgreSQL connector (`pgoutput`) and the outbox EventRouter, publishing to Kafka with a
//! KafkaProducer (`e2e/bench/peers/debezium/DebeziumRelay.java`). Its jars are resolved from Maven
//! Central by the pom beside it into the e2e cache, and the Java file is compiled there with javac
//! once per version of its source; the relay runs as one JVM process.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use tempfile::TempDir;

use crate::process::Process;

pub const VERSION: &str = "3.6.1.Final";
const READY_LINE: &str = "debezium relay: task started";
const START_TIMEOUT: Duration = Duration::from_secs(120);

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/peers/debezium")
}

/// `java -cp` for the relay: the jars and the compiled class, built on first use.
pub async fn classpath() -> Result<String> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let libs = crate::brokers::maven_jars(&source_dir().join("pom.xml"), &format!("debezium-{VERSION}")).await?;
    let _one_at_a_time = LOCK.lock().await;
    let src = source_dir().join("DebeziumRelay.java");
    let code = std::fs::read_to_string(&src).with_context(|| format!("reading {}", src.display()))?;
    let dir = libs.parent().context("the jars' directory has a parent")?.to_path_buf();
    let classes = dir.join("classes");
    // The cache entry is the source's copy next to the class: an edited source compiles again.
    let copy = dir.join("DebeziumRelay.java.compiled");
    if !(std::fs::read_to_string(&copy).is_ok_and(|c| c == code) && classes.join("DebeziumRelay.class").is_file()) {
        let staging = tempfile::Builder::new().prefix("classes-").tempdir_in(&dir)?;
        let mut javac = Command::new("javac");
        javac.arg("-d").arg(staging.path()).arg("-cp").arg(format!("{}/*", libs.display())).arg(&src);
        let out = tokio::task::spawn_blocking(move || javac.output())
            .await?
            .context("running javac for the Debezium peer (install a JDK: apt-get install openjdk-17-jdk-headless)")?;
        if !out.status.success() {
            bail!("javac {} failed:\n{}", src.display(), String::from_utf8_lossy(&out.stderr));
        }
        let _ = std::fs::remove_dir_all(&classes);
        std::fs::rename(staging.keep(), &classes)?;
        std::fs::write(&copy, code)?;
    }
    Ok(format!("{}/*:{}", libs.display(), classes.display()))
}

/// One running Debezium relay (a JVM), stopped when dropped.
pub struct DebeziumRelay {
    process: Process,
    _dir: TempDir,
}

impl DebeziumRelay {
    /// Starts the relay with these engine, connector and (prefixed `producer.`) KafkaProducer
    /// properties, and waits until the connector's task has started.
    pub async fn start(name: &str, properties: &[(String, String)]) -> Result<Self> {
        let cp = classpath().await?;
        let dir = tempfile::Builder::new().prefix("highwater-debezium-").tempdir()?;
        let file = dir.path().join("relay.properties");
        let text: String = properties.iter().map(|(k, v)| format!("{k}={}\n", v.replace('\\', "\\\\"))).collect();
        std::fs::write(&file, text)?;
        let mut java = Command::new("java");
        // The JVM's own defaults (heap sized from the machine's memory, G1): what a user runs.
        java.arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-cp")
            .arg(cp)
            .arg("DebeziumRelay")
            .arg(&file)
            .current_dir(dir.path());
        let mut process = Process::spawn(name, java, &dir.path().join("relay.log"))?;
        let log = process.log_path().to_path_buf();
        process
            .wait_ready(&format!("the log line {READY_LINE:?}"), START_TIMEOUT, || {
                let found = std::fs::read_to_string(&log).is_ok_and(|t| t.contains(READY_LINE));
                async move { found }
            })
            .await?;
        Ok(DebeziumRelay { process, _dir: dir })
    }

    pub fn pid(&self) -> Result<u32> {
        self.process.pid().context("the Debezium relay has been stopped")
    }

    /// An error with the end of its log if the JVM has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.process.check_running()
    }
}

/// The engine and connector properties for a relay of `public.outbox` in `database` (on the
/// loopback cluster at `pg_port`) through the existing `slot` and `publication`, routed to
/// `topic` on `bootstrap`.
pub fn properties(
    pg_port: u16,
    database: &str,
    slot: &str,
    publication: &str,
    bootstrap: &str,
    topic: &str,
) -> Vec<(String, String)> {
    let p = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    vec![
        p("name", &format!("bench-{slot}")),
        p("connector.class", "io.debezium.connector.postgresql.PostgresConnector"),
        // A fresh relay per run: the slot, created before the backlog was written, is where it
        // starts; the engine still confirms its position to the slot as it goes.
        p("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore"),
        p("offset.flush.interval.ms", "1000"),
        p("database.hostname", "127.0.0.1"),
        p("database.port", &pg_port.to_string()),
        p("database.user", "postgres"),
        p("database.password", "unused-the-cluster-trusts-loopback"),
        p("database.dbname", database),
        p("topic.prefix", "bench"),
        p("plugin.name", "pgoutput"),
        p("slot.name", slot),
        p("publication.name", publication),
        p("publication.autocreate.mode", "disabled"),
        p("table.include.list", "public.outbox"),
        p("snapshot.mode", "no_data"),
        // Debezium's default (500 ms) is how long the engine sleeps when its queue is empty: a
        // latency floor highwater's NOTIFY does not have. 10 ms is what a latency-minded user sets.
        p("poll.interval.ms", "10"),
        p("transforms", "outbox"),
        p("transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"),
        p("transforms.outbox.route.topic.replacement", topic),
        p("transforms.outbox.table.fields.additional.placement", "type:header:eventType"),
        // The producer as highwater's kafka sink configures its own: idempotent, acks=all, zstd.
        p("producer.bootstrap.servers", bootstrap),
        p("producer.acks", "all"),
        p("producer.enable.idempotence", "true"),
        p("producer.compression.type", "zstd"),
        p("producer.linger.ms", "5"),
    ]
}
