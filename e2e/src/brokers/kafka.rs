//! Apache Kafka 4.4.0 as one KRaft process (broker and controller), from the Maven Central jars
//! that `e2e/brokers/kafka/pom.xml` names, resolved once with `mvn dependency:copy-dependencies`
//! into the e2e cache and run with the machine's Java 17.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use highwater_e2e::brokers::kafka::{Kafka, KafkaOptions};
//! let mut kafka = Kafka::start(KafkaOptions::default()).await?;
//! let brokers = kafka.bootstrap(); // "127.0.0.1:<port>"
//! kafka.kill(); // SIGKILL
//! kafka.restart().await?; // same ports, same data
//! # Ok(()) }
//! ```
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Result, bail};
use highwater::embedded::free_port;
use tempfile::TempDir;

use crate::process::Process;

pub const VERSION: &str = "4.4.0";
/// Any 22-character base64 UUID: the cluster id the storage is formatted with.
const CLUSTER_ID: &str = "aGlnaHdhdGVyLWUyZS0xAA";
const READY_LINE: &str = "Kafka Server started";
const START_TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Clone, Debug, Default)]
pub struct KafkaOptions {
    /// The address clients are told to use is `127.0.0.1:<advertised_port>` instead of the
    /// listener's own port: the port of a [`crate::proxy::Proxy`] in front of [`Kafka::port`]
    /// (start it with [`Kafka::reserve_port`]'s port as its upstream).
    pub advertised_port: Option<u16>,
    /// The plaintext listener's port, e.g. one reserved for a proxy's upstream; default a free one.
    pub port: Option<u16>,
    /// Let a producer create topics by writing to them (default: no, so a missing topic is an
    /// error, as on most production clusters).
    pub auto_create_topics: bool,
    /// Adds a SASL_PLAINTEXT listener where this user and password authenticate with
    /// SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN.
    pub scram_user: Option<(String, String)>,
    /// Adds an SSL listener serving this PEM certificate and PKCS#8 key (e.g. from
    /// [`crate::pki::Pki`], valid for 127.0.0.1).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// With `tls`: the SSL listener requires a client certificate signed by this PEM CA
    /// (`ssl.client.auth=required`).
    pub client_ca: Option<PathBuf>,
}

pub struct Kafka {
    process: Process,
    dir: TempDir,
    port: u16,
    advertised_port: u16,
    sasl_port: Option<u16>,
    ssl_port: Option<u16>,
    starts: u32,
}

impl Kafka {
    /// A free loopback port for [`KafkaOptions::port`].
    pub fn reserve_port() -> Result<u16> {
        Ok(free_port()?)
    }

    pub async fn start(opts: KafkaOptions) -> Result<Kafka> {
        let libs = jars().await?;
        let dir = tempfile::Builder::new().prefix("highwater-kafka-").tempdir()?;
        let port = match opts.port {
            Some(p) => p,
            None => free_port()?,
        };
        let controller_port = free_port()?;
        let sasl_port = opts.scram_user.as_ref().map(|_| free_port()).transpose()?;
        let ssl_port = opts.tls.as_ref().map(|_| free_port()).transpose()?;
        let advertised_port = opts.advertised_port.unwrap_or(port);
        let mut props =
            properties(dir.path(), port, advertised_port, controller_port, sasl_port, opts.auto_create_topics);
        if let Some((user, password)) = &opts.scram_user {
            // PLAIN checks against users listed in its JAAS entry (SCRAM's are in the metadata log).
            props.push_str(&format!(
                "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \
                 required user_{user}=\"{password}\";\n"
            ));
        }
        if let (Some(p), Some((cert, key))) = (ssl_port, &opts.tls) {
            // Kafka reads a PEM key store: the key and its certificate in one file.
            let store = dir.path().join("keystore.pem");
            std::fs::write(&store, format!("{}{}", std::fs::read_to_string(key)?, std::fs::read_to_string(cert)?))?;
            props = props
                .replacen("\nlisteners=", &format!("\nlisteners=SSL://127.0.0.1:{p},"), 1)
                .replacen("\nadvertised.listeners=", &format!("\nadvertised.listeners=SSL://127.0.0.1:{p},"), 1)
                .replacen("\nlistener.security.protocol.map=", "\nlistener.security.protocol.map=SSL:SSL,", 1);
            props.push_str(&format!("ssl.keystore.type=PEM\nssl.keystore.location={}\n", store.display()));
            if let Some(ca) = &opts.client_ca {
                props.push_str(&format!(
                    "ssl.client.auth=required\nssl.truststore.type=PEM\nssl.truststore.location={}\n",
                    ca.display()
                ));
            }
        }
        std::fs::write(dir.path().join("server.properties"), props)?;
        std::fs::write(dir.path().join("log4j2.yaml"), LOG4J)?;
        let mut format = java(&libs, dir.path());
        format.args(["kafka.tools.StorageTool", "format", "--standalone", "-t", CLUSTER_ID, "-c"]);
        format.arg(dir.path().join("server.properties"));
        if let Some((user, password)) = &opts.scram_user {
            for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
                format.args(["--add-scram", &format!("{mechanism}=[name={user},password={password}]")]);
            }
        }
        let out = tokio::task::spawn_blocking(move || format.output()).await??;
        if !out.status.success() {
            bail!(
                "kafka StorageTool format failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut kafka =
            Kafka { process: spawn(&libs, dir.path(), 0)?, dir, port, advertised_port, sasl_port, ssl_port, starts: 1 };
        kafka.wait_started().await?;
        Ok(kafka)
    }

    async fn wait_started(&mut self) -> Result<()> {
        let log = self.process.log_path().to_path_buf();
        super::wait_for_line(&mut self.process, &log, READY_LINE, START_TIMEOUT).await
    }

    /// `127.0.0.1:<advertised port>`: what a client's `bootstrap.servers` names.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.advertised_port)
    }

    /// The SASL_PLAINTEXT (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN) listener, when the options asked
    /// for a user.
    pub fn sasl_bootstrap(&self) -> Option<String> {
        self.sasl_port.map(|p| format!("127.0.0.1:{p}"))
    }

    /// The SSL listener, when the options gave a certificate.
    pub fn ssl_bootstrap(&self) -> Option<String> {
        self.ssl_port.map(|p| format!("127.0.0.1:{p}"))
    }

    /// The plaintext listener's own port (a proxy's upstream).
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// SIGKILL: no shutdown, no flush (the records the broker acknowledged are on disk: the
    /// page cache survives a process kill).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the broker again on the same ports and data, after [`Kafka::kill`].
    pub async fn restart(&mut self) -> Result<()> {
        self.process.kill();
        let libs = jars().await?;
        self.process = spawn(&libs, self.dir.path(), self.starts)?;
        self.starts += 1;
        self.wait_started().await
    }
}

fn properties(dir: &Path, port: u16, advertised: u16, controller: u16, sasl: Option<u16>, auto_create: bool) -> String {
    let mut listeners = format!("PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}");
    let mut advertised_listeners = format!("PLAINTEXT://127.0.0.1:{advertised}");
    let mut protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".to_owned();
    let mut sasl_props = String::new();
    if let Some(s) = sasl {
        listeners.push_str(&format!(",SASL_PLAINTEXT://127.0.0.1:{s}"));
        advertised_listeners.push_str(&format!(",SASL_PLAINTEXT://127.0.0.1:{s}"));
        protocols.push_str(",SASL_PLAINTEXT:SASL_PLAINTEXT");
        sasl_props = "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN\n\
             listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
             listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
            .to_owned();
    }
    format!(
        "process.roles=broker,controller\n\
         node.id=1\n\
         listeners={listeners}\n\
         advertised.listeners={advertised_listeners}\n\
         inter.broker.listener.name=PLAINTEXT\n\
         controller.listener.names=CONTROLLER\n\
         listener.security.protocol.map={protocols}\n\
         controller.quorum.bootstrap.servers=127.0.0.1:{controller}\n\
         log.dirs={log_dir}\n\
         {sasl_props}\
         # One node: the internal topics cannot have more replicas than brokers.\n\
         offsets.topic.replication.factor=1\n\
         offsets.topic.num.partitions=3\n\
         transaction.state.log.replication.factor=1\n\
         transaction.state.log.min.isr=1\n\
         share.coordinator.state.topic.replication.factor=1\n\
         share.coordinator.state.topic.min.isr=1\n\
         # A test's consumer group starts at once instead of waiting 3 s for more members.\n\
         group.initial.rebalance.delay.ms=0\n\
         num.partitions=3\n\
         auto.create.topics.enable={auto_create}\n",
        log_dir = dir.join("data").display(),
    )
}

const LOG4J: &str = "Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: \"[%d] %p %m (%c)%n\"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
";

fn java(libs: &Path, dir: &Path) -> Command {
    let mut c = Command::new("java");
    c.arg("-Xms64m")
        .arg("-Xmx512m")
        .arg("-XX:+UseSerialGC")
        .arg("-XX:TieredStopAtLevel=1")
        .arg(format!("-Dlog4j2.configurationFile={}", dir.join("log4j2.yaml").display()))
        .arg("-cp")
        .arg(format!("{}/*", libs.display()))
        .current_dir(dir);
    c
}

fn spawn(libs: &Path, dir: &Path, n: u32) -> Result<Process> {
    let mut c = java(libs, dir);
    c.arg("kafka.Kafka").arg(dir.join("server.properties"));
    Process::spawn("kafka", c, &dir.join(format!("kafka-{n}.log")))
}

/// The broker's jars in the e2e cache, resolved with Maven on first use.
pub async fn jars() -> Result<PathBuf> {
    super::maven_jars(&Path::new(env!("CARGO_MANIFEST_DIR")).join("brokers/kafka/pom.xml"), &format!("kafka-{VERSION}"))
        .await
}
