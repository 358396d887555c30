//! A model-based property test of reading below the snapshot fence (`shards::read_batch`), on a
//! real PostgreSQL: random interleavings of concurrent transactions that append, commit out of
//! order or roll back, with a reader that reads small batches and moves its cursor. Against a
//! model of which transactions are open and which events are committed, the reader
//!  - only ever gets committed events, each once, in `(tx_id, id)` order;
//!  - never gets an event while a transaction with a smaller transaction id is still open (that
//!    transaction could still commit events that belong before it: they would be skipped);
//!  - once every transaction has ended, has got every committed event.
mod common;

use std::collections::{BTreeSet, HashMap};

use highwater::{NewEvent, Position, append, shards};
use proptest::{prelude::*, test_runner::TestRunner};
use serde_json::json;
use sqlx::{Connection, PgConnection};

const WRITERS: usize = 4;

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Appends an event in writer `w`'s transaction (beginning one if none is open).
    Append(usize),
    Commit(usize),
    Rollback(usize),
    /// The reader reads a batch of at most this many events and moves its cursor past them.
    Read(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..WRITERS).prop_map(Op::Append),
        2 => (0..WRITERS).prop_map(Op::Commit),
        1 => (0..WRITERS).prop_map(Op::Rollback),
        3 => (1..4i64).prop_map(Op::Read),
    ]
}

/// One writer's open transaction: its transaction id and the events it appended.
struct Open {
    xid: u64,
    events: Vec<i64>,
}

struct World {
    writers: Vec<PgConnection>,
    open: HashMap<usize, Open>,
    reader: PgConnection,
    cursor: Position,
    committed: BTreeSet<i64>,
    delivered: Vec<Position>,
}

impl World {
    async fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Append(w) => {
                let conn = &mut self.writers[w];
                if let std::collections::hash_map::Entry::Vacant(slot) = self.open.entry(w) {
                    sqlx::raw_sql("BEGIN").execute(&mut *conn).await.unwrap();
                    let xid: String =
                        sqlx::query_scalar("SELECT pg_current_xact_id()::text").fetch_one(&mut *conn).await.unwrap();
                    slot.insert(Open { xid: xid.parse().unwrap(), events: Vec::new() });
                }
                let id = append(conn, &NewEvent::new("m", &w.to_string(), "Tick", json!({}))).await.unwrap();
                self.open.get_mut(&w).unwrap().events.push(id);
            }
            Op::Commit(w) | Op::Rollback(w) => {
                if let Some(t) = self.open.remove(&w) {
                    let commit = matches!(op, Op::Commit(_));
                    let sql = if commit { "COMMIT" } else { "ROLLBACK" };
                    sqlx::raw_sql(sql).execute(&mut self.writers[w]).await.unwrap();
                    if commit {
                        self.committed.extend(t.events);
                    }
                }
            }
            Op::Read(limit) => {
                let batch = shards::read_batch(&mut self.reader, self.cursor, &[], limit).await.unwrap();
                prop_assert!(batch.events.len() as i64 <= limit);
                let oldest_open = self.open.values().map(|t| t.xid).min();
                for e in &batch.events {
                    let p = e.position();
                    prop_assert!(self.committed.contains(&e.id), "event {p} delivered but not committed");
                    prop_assert!(p > self.cursor, "event {p} is not after the cursor {}", self.cursor);
                    if let Some(oldest) = oldest_open {
                        prop_assert!(
                            p.tx < oldest,
                            "event {p} delivered while transaction {oldest}, older, is still open"
                        );
                    }
                    self.cursor = p;
                    self.delivered.push(p);
                }
            }
        }
        Ok(())
    }

    /// Ends every open transaction (committing), then reads until nothing is left.
    async fn finish(&mut self) -> Result<(), TestCaseError> {
        for w in 0..WRITERS {
            self.step(Op::Commit(w)).await?;
        }
        loop {
            let before = self.delivered.len();
            self.step(Op::Read(3)).await?;
            if self.delivered.len() == before {
                break;
            }
        }
        let ids: BTreeSet<i64> = self.delivered.iter().map(|p| p.id).collect();
        prop_assert_eq!(ids.len(), self.delivered.len(), "an event delivered twice");
        prop_assert_eq!(&ids, &self.committed, "delivered = committed once every transaction ended");
        prop_assert!(self.delivered.windows(2).all(|w| w[0] < w[1]), "delivered in (tx_id, id) order");
        Ok(())
    }
}

#[test]
fn reading_below_the_fence_matches_the_model() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(common::setup(&["Tick"]));
    let config = ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = TestRunner::new(config);
    runner
        .run(&prop::collection::vec(op(), 1..60), |ops| {
            rt.block_on(async {
                // Each case starts from an empty log and a cursor before everything.
                sqlx::raw_sql("DELETE FROM highwater.events").execute(&db.pool).await.unwrap();
                let mut writers = Vec::new();
                for _ in 0..WRITERS {
                    writers.push(PgConnection::connect(&db.url).await.unwrap());
                }
                let mut world = World {
                    writers,
                    open: HashMap::new(),
                    reader: PgConnection::connect(&db.url).await.unwrap(),
                    cursor: Position::ZERO,
                    committed: BTreeSet::new(),
                    delivered: Vec::new(),
                };
                for op in ops {
                    world.step(op).await?;
                }
                world.finish().await
            })
        })
        .unwrap();
}
