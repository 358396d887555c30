//! An operator whose stdout and stderr are a pipe whose reader has gone (`| head -1`, a log
//! shipper that stopped) keeps running, and SIGTERM or SIGINT still stops it cleanly: a log line
//! that cannot be written is dropped, never a panic in the task that logged it (issue 44).
//!
//! No control plane is needed: the operator is held where it logs on its own, retrying a
//! "database" that accepts connections and closes them at once, which counts each try (and so
//! each log line written into the closed pipe).
use std::{
    io::{BufRead, BufReader, PipeReader},
    net::TcpListener,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use highwater::embedded::free_port;
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

/// A TCP port that accepts and drops every connection, counting them.
fn closing_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tries = Arc::new(AtomicUsize::new(0));
    let counted = tries.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    (port, tries)
}

/// A kubeconfig naming an API server that is never reached: the operator only builds its client
/// before it connects to the database.
fn kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: none\n\
         clusters: [{name: none, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n\
         users: [{name: none, user: {token: none}}]\n\
         contexts: [{name: none, context: {cluster: none, user: none}}]\n",
    )
    .unwrap();
    path
}

fn start(kubeconfig: &std::path::Path, db_port: u16) -> (Child, PipeReader) {
    let (reader, writer) = std::io::pipe().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_highwater-operator"))
        .args(["--listen", &format!("127.0.0.1:{}", free_port().unwrap()), "--leader-election", "false"])
        .args(["--connect-timeout", "10m"])
        .env("KUBECONFIG", kubeconfig)
        .env("DATABASE_URL", format!("postgres://postgres@127.0.0.1:{db_port}/postgres"))
        .env("HIGHWATER_LOG", "info,kube=warn,sqlx=warn")
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .expect("start the operator");
    (child, reader)
}

/// Reads the pipe like `head` until a line containing `what`, then closes it.
fn read_until_then_close(reader: PipeReader, what: &'static str, within: Duration) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            let found = line.contains(what);
            seen.push(line);
            if found {
                break;
            }
        }
        let _ = tx.send(seen);
    });
    let seen = rx.recv_timeout(within).unwrap_or_else(|_| panic!("no log line with {what:?} within {within:?}"));
    assert!(seen.last().is_some_and(|l| l.contains(what)), "the log ended before {what:?}:\n{}", seen.join("\n"));
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_closed_log_pipe_neither_stops_the_operator_nor_its_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path());
    let (db_port, tries) = closing_server();
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let (mut op, reader) = start(&kubeconfig, db_port);
        read_until_then_close(reader, "database not reachable yet", Duration::from_secs(60));
        // Three more tries, each one logged into the closed pipe.
        let after = tries.load(Ordering::SeqCst) + 3;
        let deadline = Instant::now() + Duration::from_secs(60);
        while tries.load(Ordering::SeqCst) < after && op.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the operator stopped retrying the database");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(op.try_wait().unwrap().is_none(), "{signal}: logging into a closed pipe must not end the operator");
        kill(Pid::from_raw(op.id() as i32), signal).unwrap();
        assert_eq!(
            wait_exit(&mut op, Duration::from_secs(15)),
            Some(0),
            "{signal} stops an operator whose log pipe is closed, cleanly"
        );
    }
}
