//! The shared cluster: each test's database is apart from the others', and the cluster stops,
//! its directory removed, when the test process dies, even by SIGKILL.
use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use highwater_testkit::{shared_cluster, shared_db};
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use sqlx::postgres::PgListener;

/// Two tests at once on the one cluster: the same server, separate databases, each migrated,
/// and a notification in one is not heard in the other.
#[tokio::test]
async fn databases_on_the_shared_cluster_are_apart() {
    let (a, b) = tokio::join!(shared_db(&["Tick"]), shared_db(&[]));
    assert_eq!(a.cluster.port(), b.cluster.port(), "one cluster");
    assert_ne!(a.name, b.name);
    for db in [&a, &b] {
        let migrated: i64 =
            sqlx::query_scalar("SELECT count(*) FROM highwater.events").fetch_one(&db.pool).await.unwrap();
        assert_eq!(migrated, 0, "{}: the template's schema, no events", db.name);
    }
    let types = |db| async move {
        sqlx::query_scalar::<_, String>("SELECT DISTINCT event_type FROM highwater.event_types ORDER BY 1")
            .fetch_all(&db)
            .await
            .unwrap()
    };
    assert_eq!(types(a.pool.clone()).await, ["Tick"]);
    assert!(types(b.pool.clone()).await.is_empty(), "types registered for one test are its own");

    sqlx::query("CREATE TABLE only_in_a (x int)").execute(&a.pool).await.unwrap();
    let in_b: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('only_in_a')::text").fetch_one(&b.pool).await.unwrap();
    assert_eq!(in_b, None);

    let mut listen_a = PgListener::connect_with(&a.pool).await.unwrap();
    listen_a.listen("hw_test").await.unwrap();
    sqlx::query("SELECT pg_notify('hw_test', 'from b')").execute(&b.pool).await.unwrap();
    sqlx::query("SELECT pg_notify('hw_test', 'from a')").execute(&a.pool).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), listen_a.recv()).await.unwrap().unwrap();
    assert_eq!(heard.payload(), "from a", "the first notification a hears is its own");
}

/// The child of [`the_cluster_stops_when_its_test_process_is_killed`]: starts the shared cluster,
/// says where it is, and waits to be killed.
#[tokio::test]
#[ignore = "run as a child process by the_cluster_stops_when_its_test_process_is_killed"]
async fn child_holds_the_shared_cluster() {
    let db = shared_db(&[]).await;
    let pg = shared_cluster();
    println!("CLUSTER {} {}", pg.pid().expect("running"), pg.root().display());
    sqlx::query("SELECT 1").execute(&db.pool).await.unwrap();
    tokio::time::sleep(Duration::from_secs(300)).await;
}

fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        // A zombie has exited; its new parent reaps it when it gets to it.
        Ok(status) => !status.lines().any(|l| l.starts_with("State:") && l.contains('Z')),
        Err(_) => false,
    }
}

/// Kills the child test process however the parent test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_cluster_stops_when_its_test_process_is_killed() {
    let mut child = Killed(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_holds_the_shared_cluster", "--ignored", "--nocapture", "--test-threads", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = BufReader::new(child.0.stdout.take().unwrap());
    let (pid, root): (u32, PathBuf) = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            // After the harness's "test child_holds_the_shared_cluster ... ".
            let rest = &l[l.find("CLUSTER ")? + "CLUSTER ".len()..];
            let (pid, root) = rest.split_once(' ')?;
            Some((pid.parse().ok()?, PathBuf::from(root)))
        })
        .expect("the child test printed its cluster");
    assert!(running(pid), "the postmaster {pid} runs while its test process lives");
    assert!(root.join("data").is_dir());

    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGKILL).unwrap();
    child.0.wait().unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    while (running(pid) || root.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!running(pid), "the postmaster {pid} outlived its test process by 20 s");
    assert!(!root.exists(), "{} outlived its test process by 20 s", root.display());
}
