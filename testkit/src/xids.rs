//! Transaction-id boundaries: a cluster whose counter starts where a long-lived database's
//! stands (a power of ten, the 32-bit epoch), and a way to walk up to one after a test's setup.
use highwater::{
    Error, Result, Xid8,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
};
use nix::unistd::chown;

/// [`EmbeddedPostgres::start`] with the cluster's transaction counter at `next_xid` (an `xid8`:
/// epoch in the high 32 bits) instead of just after initdb's, set with `pg_resetwal -x/-e`.
pub async fn start_at(options: EmbeddedOptions, next_xid: u64) -> Result<EmbeddedPostgres> {
    let mut pg = EmbeddedPostgres::prepare(options)?;
    pg.initdb()?;
    reset_next_xid(&pg, next_xid)?;
    pg.run().await?;
    Ok(pg)
}

/// `pg_resetwal -x/-e` on the stopped cluster. The commit-log segment that holds the new id must
/// exist before the server starts (as pg_resetwal's manual says), so it is created zero-filled:
/// no transaction in it has committed yet.
fn reset_next_xid(pg: &EmbeddedPostgres, next: u64) -> Result<()> {
    let (epoch, xid) = ((next >> 32) as u32, next as u32);
    if xid < 3 {
        return Err(Error::Embedded(format!(
            "next_xid {next}: its low 32 bits must be at least 3 (ids 0-2 are reserved)"
        )));
    }
    // initdb creates the `postgres` database after freezing template1: rows with ordinary xmins
    // that a counter moved 2^31 ahead would read as written in the future (invisible). Freeze
    // them first, in single-user mode.
    let mut single = pg
        .command("postgres")
        .args(["--single", "-D"])
        .arg(pg.data_dir())
        .arg("postgres")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(Error::io("starting postgres --single"))?;
    std::io::Write::write_all(single.stdin.as_mut().expect("piped stdin"), b"VACUUM FREEZE;\n")
        .map_err(Error::io("writing to postgres --single"))?;
    drop(single.stdin.take());
    let out = single.wait_with_output().map_err(Error::io("running postgres --single"))?;
    if !out.status.success() {
        return Err(Error::Embedded(format!("VACUUM FREEZE failed: {}", String::from_utf8_lossy(&out.stderr))));
    }
    // 32 pages of 8 kB, two status bits a transaction: 1,048,576 transactions a segment.
    const XACTS_PER_SEGMENT: u32 = 32 * 8192 * 4;
    let segment = pg.data_dir().join("pg_xact").join(format!("{:04X}", xid / XACTS_PER_SEGMENT));
    if !segment.exists() {
        std::fs::write(&segment, vec![0u8; 32 * 8192]).map_err(Error::io("creating a pg_xact segment"))?;
        if let Some(u) = pg.owner() {
            let _ = chown(&segment, Some(u.uid), Some(u.gid));
        }
    } else {
        // initdb writes only the pages it used (the first of segment 0): an id further into the
        // segment needs its page there too, zero-filled likewise.
        let f =
            std::fs::OpenOptions::new().write(true).open(&segment).map_err(Error::io("opening a pg_xact segment"))?;
        let len = f.metadata().map_err(Error::io("reading a pg_xact segment"))?.len();
        if len < 32 * 8192 {
            f.set_len(32 * 8192).map_err(Error::io("extending a pg_xact segment"))?;
        }
    }
    let out = pg
        .command("pg_resetwal")
        .args(["-x", &xid.to_string(), "-e", &epoch.to_string(), "-D"])
        .arg(pg.data_dir())
        .output()
        .map_err(Error::io("running pg_resetwal"))?;
    if !out.status.success() {
        return Err(Error::Embedded(format!("pg_resetwal failed: {}", String::from_utf8_lossy(&out.stderr))));
    }
    Ok(())
}

/// Uses up transaction ids until the next one assigned is at least `target` (an `xid8`), so a
/// test can stand just below a boundary after its setup. One server-side loop, a commit each.
pub async fn burn_xids_to(pool: &sqlx::PgPool, target: u64) -> Result<()> {
    let next: Xid8 = sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())").fetch_one(pool).await?;
    if next.0 >= target {
        return Ok(());
    }
    let n = target - next.0;
    // The simple protocol: a DO block may commit only outside a transaction block.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
    )))
    .execute(pool)
    .await?;
    Ok(())
}
