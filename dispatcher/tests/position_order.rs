//! Positions order the same way in SQL (`xid8`, as the delivery, retention and rewind queries
//! compare them) and in Rust (`Position`, as the dispatcher and the auditors compare them), on
//! both sides of every power of ten and of the 32-bit epoch, where text order and numeric order
//! part. The typed `Xid8` codec round-trips every value PostgreSQL prints.
mod common;

use highwater::{Position, Xid8};
use proptest::{prelude::*, test_runner::TestRunner};

/// Transaction ids near a boundary: 10^k or 2^k, a few ids either side.
fn tx_near_boundary() -> impl Strategy<Value = u64> {
    let power_of_ten = (1u32..=19).prop_map(|k| 10u64.pow(k));
    let power_of_two = (31u32..=63).prop_map(|k| 1u64 << k);
    (prop_oneof![power_of_ten, power_of_two, Just(u64::MAX - 3)], -3i64..=3)
        .prop_map(|(b, d)| b.saturating_add_signed(d))
}

fn position() -> impl Strategy<Value = Position> {
    (tx_near_boundary(), 0i64..4).prop_map(|(tx, id)| Position::new(tx, id))
}

#[test]
fn sql_and_rust_order_positions_alike_across_digit_and_epoch_boundaries() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(common::setup(&[]));
    let mut runner = TestRunner::new(ProptestConfig { cases: 200, ..ProptestConfig::default() });
    runner
        .run(&proptest::collection::vec(position(), 2..12), |positions| {
            let (txs, ids): (Vec<Xid8>, Vec<i64>) = positions.iter().map(|p| (p.xid8(), p.id)).unzip();
            let (sorted_sql, text, below): (Vec<Position>, Vec<String>, Vec<bool>) = rt.block_on(async {
                let sorted: Vec<(Xid8, i64)> = sqlx::query_as(
                    "SELECT t, i FROM unnest($1::xid8[], $2::bigint[]) AS u(t, i) ORDER BY t, i",
                )
                .bind(&txs)
                .bind(&ids)
                .fetch_all(&db.pool)
                .await
                .unwrap();
                let text: Vec<String> = sqlx::query_scalar("SELECT t::text FROM unnest($1::xid8[]) WITH ORDINALITY AS u(t, n) ORDER BY n")
                    .bind(&txs)
                    .fetch_all(&db.pool)
                    .await
                    .unwrap();
                // Each position against the first, as the retention check compares a cursor.
                let below: Vec<bool> = sqlx::query_scalar(
                    "SELECT (t, i) < ($3, $4) FROM unnest($1::xid8[], $2::bigint[]) WITH ORDINALITY AS u(t, i, n) ORDER BY n",
                )
                .bind(&txs)
                .bind(&ids)
                .bind(positions[0].xid8())
                .bind(positions[0].id)
                .fetch_all(&db.pool)
                .await
                .unwrap();
                (sorted.into_iter().map(Position::from).collect(), text, below)
            });
            let mut sorted_rust = positions.clone();
            sorted_rust.sort();
            prop_assert_eq!(&sorted_sql, &sorted_rust);
            let printed: Vec<String> = positions.iter().map(|p| p.tx.to_string()).collect();
            prop_assert_eq!(text, printed, "the binary codec carries the value PostgreSQL prints");
            let below_rust: Vec<bool> = positions.iter().map(|p| *p < positions[0]).collect();
            prop_assert_eq!(below, below_rust);
            Ok(())
        })
        .unwrap();
}

/// Text order is not position order: the reason positions never travel as text.
#[test]
fn text_order_differs_from_position_order_at_a_power_of_ten() {
    let (a, b) = (Position::new(9_999, 1), Position::new(10_000, 2));
    assert!(a < b);
    assert!(a.tx.to_string() > b.tx.to_string());
}
