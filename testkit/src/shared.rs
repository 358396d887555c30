//! One PostgreSQL cluster per test binary, a database of its own for each test.
//!
//! Starting a cluster (initdb, start, migrate) costs about a second; most tests need only a
//! database. [`shared_db`] clones a database from `hw_template`, migrated once when the cluster
//! started: `CREATE DATABASE … TEMPLATE` copies files, no migration runs again.
//!
//! What a database does not separate, a test on the shared cluster must not touch: the fence
//! (the snapshot xmin is cluster-wide, so a transaction held open in one database holds back
//! every database's delivery), `pg_stat_activity`, transaction-id boundaries, roles, server
//! settings, restarts. Such tests start a cluster of their own. LISTEN/NOTIFY is per database.
use std::sync::{
    OnceLock,
    atomic::{AtomicU32, Ordering},
};

use highwater::{
    Result, db,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    event_types,
};
use sqlx::PgPool;

use crate::watchdog::Watchdog;

const TEMPLATE: &str = "hw_template";

struct Shared {
    pg: EmbeddedPostgres,
    /// The number of the next test database (`t0`, `t1`, …): one cluster per process, so a
    /// process-wide counter names them uniquely.
    next: AtomicU32,
    _watchdog: Watchdog,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// A test's database on the shared cluster, migrated, its event types registered.
pub struct SharedDb {
    pub pool: PgPool,
    pub url: String,
    pub name: String,
    pub cluster: &'static EmbeddedPostgres,
}

/// A new database on this test binary's shared cluster (started on first use), cloned from the
/// migrated template, with the event types `types` registered (no schema).
pub async fn shared_db(types: &[&str]) -> SharedDb {
    let shared = shared();
    let name = format!("t{}", shared.next.fetch_add(1, Ordering::Relaxed));
    let admin = PgPool::connect(&shared.pg.url()).await.expect("connect to the shared cluster");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name} TEMPLATE {TEMPLATE}")))
        .execute(&admin)
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name} TEMPLATE {TEMPLATE}: {e}"));
    admin.close().await;
    let url = shared.pg.url_for(&name);
    let pool = db::connect(&url, 20).await.expect("connect");
    for t in types {
        event_types::register(&pool, t, None, None).await.expect("register type");
    }
    SharedDb { pool, url, name, cluster: &shared.pg }
}

/// This test binary's shared cluster, started on first use.
pub fn shared_cluster() -> &'static EmbeddedPostgres {
    &shared().pg
}

fn shared() -> &'static Shared {
    SHARED.get_or_init(|| {
        // Each `#[tokio::test]` has a runtime of its own, gone when that test ends: the cluster
        // is started on a thread and runtime of their own, which end once it runs (the server is
        // a process; every test connects with its own pool).
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
            rt.block_on(start())
        })
        .join()
        .expect("the thread starting the shared cluster panicked")
        .unwrap_or_else(|e| panic!("starting the shared PostgreSQL cluster: {e}"))
    })
}

async fn start() -> Result<Shared> {
    let mut options = EmbeddedOptions::default();
    // Two tests at once, each with its pools and dispatchers, where each had 200 to itself.
    for (name, value) in &mut options.settings {
        if name == "max_connections" {
            *value = "400".into();
        }
    }
    let pg = EmbeddedPostgres::start(options).await?;
    let watchdog = Watchdog::arm(&pg)?;
    let url = pg.create_database(TEMPLATE).await?;
    let pool = db::connect(&url, 2).await?;
    db::migrate(&pool).await?;
    pool.close().await;
    // Nobody may connect to it any more: CREATE DATABASE refuses a template in use.
    let admin = PgPool::connect(&pg.url()).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {TEMPLATE} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"
    )))
    .execute(&admin)
    .await?;
    admin.close().await;
    Ok(Shared { pg, next: AtomicU32::new(0), _watchdog: watchdog })
}
