//! River (Go job queue): inserts the events as jobs, then its workers complete them with a no-op
//! worker. Runs in its own database of the same cluster.
use anyhow::Result;

use super::{BenchDb, go_peers};

pub async fn drain(bench: &BenchDb, events: i64) -> Result<go_peers::PeerRun> {
    let url = bench.pg.create_database("peer_river").await?;
    go_peers::run("river-peer", vec![format!("-url={url}"), format!("-n={events}")]).await
}
