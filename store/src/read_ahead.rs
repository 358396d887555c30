//! Reading a shard's next batch while the current one is delivered, and the rule that decides
//! whether that batch may be delivered.
//!
//! A pass of an external sink reads a batch, delivers it, then moves the cursor; PostgreSQL is
//! idle while the sink works and the sink is idle while PostgreSQL reads. With a full batch, the
//! pass reads the batch after its end on the claim's connection (which an external sink does not
//! use) while the sink delivers, so the next pass costs the longer of the two instead of their
//! sum (docs/bench/history.md). A SQL sink's pass does the same on a second connection of the pool,
//! since the claim's runs the batch; that read does not see the batch's open transaction.
//!
//! The read happens before the cursor update that makes it the next batch, so an operator's
//! command (disable, skip, rewind, rebuild, a change of partitions) may land between them. The
//! batch is used only when the update succeeded (it refuses unless the cursor is still where the
//! pass left it, the shard still delivers and no barrier is passed) and every input of the read
//! that the update does not write is the same in the row the update left as in the row the read
//! saw: due for delivery, cursor, events passed over, partition, no barrier. Anything else
//! discards it and the next pass reads again under its claim, as without a read ahead.
use sqlx::PgConnection;

use crate::{
    Position, Result,
    shards::{self, Batch, Shard},
};

/// A batch read ahead of the cursor, and the shard row as its read saw it.
pub struct Ahead {
    read: shards::Read,
}

/// Reads up to `limit` events after `from` (the end of the batch being delivered) for `shard`,
/// in one statement, as [`shards::load_and_read`] would once the cursor is at `from`.
pub async fn read(
    conn: &mut PgConnection,
    shard: &Shard,
    from: Position,
    types: &[String],
    limit: i64,
    bodies: impl Into<crate::events::Bodies>,
) -> Result<Option<Ahead>> {
    let r = shards::ShardRead {
        consumer: &shard.consumer,
        instance: &shard.instance_id,
        types,
        limit,
        bodies: bodies.into(),
        waiting: false,
    };
    let read = shards::read_from(conn, &r, Some(from)).await?;
    Ok(read.map(|read| Ahead { read }))
}

impl Ahead {
    /// The next pass's shard and batch, when the update from `cursor` (the cursor the read saw
    /// the pass start from) left `advanced` and the read still stands; `None` to read again.
    pub fn after(self, cursor: Position, advanced: Shard) -> Option<(Shard, Batch)> {
        let seen = &self.read.shard;
        let stands = self.read.due
            && seen.cursor == cursor
            && self.read.skip == advanced.skip
            && seen.partition == advanced.partition
            && seen.barrier.is_none()
            && advanced.barrier.is_none();
        stands.then_some((advanced, self.read.batch))
    }
}
