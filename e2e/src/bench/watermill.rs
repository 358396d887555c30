//! watermill-sql (Go): publishes the events with its publisher, then one consumer group drains
//! them with its subscriber (an offsets table per consumer group: highwater's pattern). Runs in
//! its own database of the same cluster.
use anyhow::Result;

use super::{BenchDb, go_peers};

pub async fn drain(bench: &BenchDb, events: i64, batch: i64) -> Result<go_peers::PeerRun> {
    let url = bench.pg.create_database("peer_watermill").await?;
    go_peers::run("watermill-peer", vec![format!("-url={url}"), format!("-n={events}"), format!("-batch={batch}")])
        .await
}
