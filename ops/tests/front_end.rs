//! A new front end needs nothing but this crate: redrive, discard, replay, the shard changes and
//! rebuild driven through `highwater_ops` alone against a real PostgreSQL (the embedded cluster
//! dispatcher/tests use), with its dry run, its confirmation above the threshold, the audit of who and why, the
//! progress, and the typed errors (an unknown consumer is `NotFound`, a request that does not
//! apply is `Refused`) with nothing changed by a refusal.
use std::sync::atomic::{AtomicUsize, Ordering};

use highwater::embedded::{EmbeddedOptions, EmbeddedPostgres};
use highwater_ops::{
    Audit, CONFIRM_ABOVE, Confirm, Discard, Error, Operation, Progressing, Ran, Redrive, Replay, execute,
    redrive_rows::Selection, run,
};
use highwater_store::{NewEvent, append, db, definitions, event_types, shards};
use serde_json::json;
use sqlx::PgPool;

const CONSUMER: &str = "---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: c}
spec:
  delivery: Shared
  errorMode: skip
  sink: {sql: {statement: 'SELECT 1'}}
";

/// A migrated cluster with consumer `c`, its shard, `n` events of stream `order/o-1` and a dead
/// letter of each (as a dispatcher parks them); the shard's cursor past them all.
async fn parked(n: usize) -> (EmbeddedPostgres, PgPool, Vec<i64>) {
    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("start postgres");
    let pool = db::connect(&pg.url(), 4).await.expect("connect");
    db::migrate(&pool).await.expect("migrate");
    event_types::register(&pool, "Tick", None, None).await.expect("register type");
    let defs = definitions::parse(CONSUMER, "test").expect("parse");
    definitions::apply(&pool, &defs).await.expect("apply");
    let mut tx = pool.begin().await.unwrap();
    shards::register(&mut tx, "c", "__shared__", None).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(append(&mut tx, &NewEvent::new("order", "o-1", "Tick", json!({"n": i}))).await.unwrap());
    }
    tx.commit().await.unwrap();
    sqlx::query(
        "INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error)
         SELECT 'c', '__shared__', id, 1, 'boom' FROM unnest($1::bigint[]) AS id",
    )
    .bind(&ids)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE highwater.consumer_shards s SET cursor_tx = e.tx_id, cursor_id = e.id
           FROM highwater.events e WHERE s.consumer = 'c' AND e.id = $1",
    )
    .bind(ids.last().unwrap())
    .execute(&pool)
    .await
    .unwrap();
    (pg, pool, ids)
}

/// `(redrive requested, discarded)` dead letters of `c`.
async fn marked(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE redrive_at IS NOT NULL), count(*) FILTER (WHERE discarded_at IS NOT NULL)
           FROM highwater.dead_letters WHERE consumer = 'c'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

fn audit(reason: &str) -> Audit {
    Audit { by: "front-end-test".into(), reason: Some(reason.into()) }
}

fn all_of(consumer: &str) -> Redrive {
    Redrive { selection: Selection { consumer: consumer.into(), all: true, ..Default::default() }, rate: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_discard_and_replay_through_the_crate_alone() {
    let n = CONFIRM_ABOVE + 1;
    let (_pg, pool, ids) = parked(n).await;
    let p = &pool;

    // Typed errors, nothing changed: the variant, not the text, says what happened.
    match execute(&all_of("nope"), p, &audit("x"), Confirm::Given).await {
        Err(Error::NotFound { consumer }) => assert_eq!(consumer, "nope"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let nothing = Redrive { selection: Selection { consumer: "c".into(), ..Default::default() }, rate: None };
    assert!(matches!(nothing.validate(&audit("x")), Err(Error::Refused { .. })));
    let no_reason = Discard { consumer: "c".into(), event: ids[0], instance: None };
    assert!(matches!(execute(&no_reason, p, &Audit::default(), Confirm::Given).await, Err(Error::Refused { .. })));
    assert_eq!(marked(p).await, (0, 0));

    // Discard: always a question; refused unless given, then audited.
    let refused = execute(&no_reason, p, &audit("cannot be fixed"), Confirm::Refuse { fix: "say yes" }).await;
    match refused {
        Err(e @ Error::Refused { .. }) => {
            assert!(e.to_string().contains(&format!("discard the dead letter of event {}", ids[0])), "{e}");
            assert!(e.to_string().ends_with("fix: say yes"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let d = execute(&no_reason, p, &audit("cannot be fixed"), Confirm::Given).await.unwrap();
    assert_eq!((d.event_id, d.instances.clone()), (ids[0], vec!["__shared__".to_owned()]));
    let (by, why): (String, String) = sqlx::query_as(
        "SELECT discarded_by, discard_reason FROM highwater.dead_letters WHERE consumer = 'c' AND event_id = $1",
    )
    .bind(ids[0])
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!((by.as_str(), why.as_str()), ("front-end-test", "cannot be fixed"));
    assert_eq!(marked(p).await, (0, 1));

    // Redrive of the other n - 1 = CONFIRM_ABOVE: under the threshold, no question.
    let op = all_of("c");
    let Ran::Previewed(plan) = run(&op, p, &audit("x"), true, Confirm::Given).await.unwrap() else {
        panic!("a dry run previews")
    };
    assert_eq!(plan.selected.len(), CONFIRM_ABOVE);
    assert!(!op.needs_confirmation(&plan));
    assert_eq!(marked(p).await, (0, 1), "a dry run changes nothing");

    // One more dead letter: above the threshold, asked (and a "no" changes nothing).
    sqlx::query("UPDATE highwater.dead_letters SET discarded_at = NULL WHERE consumer = 'c'").execute(p).await.unwrap();
    let asked = AtomicUsize::new(0);
    let say_no = |q: &highwater_ops::Question| {
        asked.fetch_add(1, Ordering::SeqCst);
        assert_eq!(q.question, format!("redrive {n} dead letters of consumer c"));
        assert!(q.dry_run_first);
        Err(Error::refused("not confirmed; nothing changed", "ask again"))
    };
    assert!(matches!(run(&op, p, &audit("x"), false, Confirm::Ask(&say_no)).await, Err(Error::Refused { .. })));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    match run(&op, p, &audit("x"), false, Confirm::Refuse { fix: "send yes" }).await {
        Err(e) => assert!(
            e.to_string().starts_with(&format!(
                "redrive {n} dead letters of consumer c: more than {CONFIRM_ABOVE} need a confirmation"
            )),
            "{e}"
        ),
        Ok(_) => panic!("above the threshold without a confirmation"),
    }
    assert_eq!(marked(p).await, (0, 0));
    let say_yes = |_: &highwater_ops::Question| Ok(());
    let Ran::Executed(plan) = run(&op, p, &audit("fixed"), false, Confirm::Ask(&say_yes)).await.unwrap() else {
        panic!("executed")
    };
    assert_eq!(plan.selected.len(), n);
    assert_eq!(marked(p).await, (n as i64, 0));
    let (by, why): (String, String) =
        sqlx::query_as("SELECT DISTINCT redrive_by, redrive_reason FROM highwater.dead_letters WHERE consumer = 'c'")
            .fetch_one(p)
            .await
            .unwrap();
    assert_eq!((by.as_str(), why.as_str()), ("front-end-test", "fixed"));
    // No dispatcher runs: all pending, and a zero wait reads once.
    let progress = highwater_ops::wait(&op, p, &plan, std::time::Duration::ZERO).await.unwrap();
    assert_eq!((progress.pending(), progress.failed().len()), (n as u64, 0));

    // Replay: the stream's events are dead letters not yet redriven, so none can be replayed
    // (refused, nothing recorded); once they are redriven, each is.
    let replay = Replay { consumer: "c".into(), stream: "order/o-1".into(), since: None };
    assert!(matches!(replay.validate(&audit("x")), Ok(())));
    let bad = Replay { stream: "order".into(), ..replay.clone() };
    assert!(matches!(bad.validate(&audit("x")), Err(Error::Refused { .. })));
    let unknown = Replay { consumer: "nope".into(), ..replay.clone() };
    assert!(matches!(execute(&unknown, p, &audit("x"), Confirm::Given).await, Err(Error::NotFound { .. })));
    match execute(&replay, p, &audit("x"), Confirm::Given).await {
        Err(Error::Refused { problem, .. }) => assert!(problem.contains("can be replayed"), "{problem}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    sqlx::query("UPDATE highwater.dead_letters SET redrive_at = NULL, redriven_at = now() WHERE consumer = 'c'")
        .execute(p)
        .await
        .unwrap();
    match run(&replay, p, &audit("row rebuilt"), false, Confirm::Refuse { fix: "send yes" }).await {
        Err(Error::Refused { problem, .. }) => assert!(problem.starts_with(&format!("replay {n} events")), "{problem}"),
        other => panic!("expected a refusal above the threshold, got {other:?}"),
    }
    let plan = execute(&replay, p, &audit("row rebuilt"), Confirm::Given).await.unwrap();
    assert_eq!(plan.selected.len(), n);
    let (rows, by, why): (i64, String, String) =
        sqlx::query_as("SELECT count(*), min(requested_by), min(reason) FROM highwater.replays WHERE request_id = $1")
            .bind(plan.request_id.unwrap())
            .fetch_one(p)
            .await
            .unwrap();
    assert_eq!((rows, by.as_str(), why.as_str()), (n as i64, "front-end-test", "row rebuilt"));
    let progress = replay.progress(p, &plan).await.unwrap();
    assert_eq!(progress.pending(), n as u64);
}

async fn cursor(pool: &PgPool) -> (String, i64) {
    sqlx::query_as("SELECT status::text, cursor_id FROM highwater.consumer_shards WHERE consumer = 'c'")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_changes_and_rebuild_through_the_crate_alone() {
    use highwater_ops::{Change, Rebuild, ShardChange};
    use highwater_store::ops::RewindTo;
    let (_pg, pool, ids) = parked(3).await;
    let p = &pool;
    let change = |change| ShardChange { consumer: "c".into(), instance: None, change };
    let refuse = Confirm::Refuse { fix: "confirm it" };

    let unknown = ShardChange { consumer: "nope".into(), ..change(Change::Disable) };
    assert!(matches!(execute(&unknown, p, &audit("x"), Confirm::Given).await, Err(Error::NotFound { .. })));
    let done = execute(&change(Change::Disable), p, &audit("maintenance"), refuse).await.unwrap();
    assert_eq!(done[0].to_string(), "eventconsumer/c disabled (instance __shared__; was idle)");
    assert_eq!(cursor(p).await, ("disabled".into(), ids[2]));
    let refuse = Confirm::Refuse { fix: "confirm it" };
    match execute(&change(Change::Restart), p, &audit("x"), refuse).await {
        Err(e @ Error::Refused { .. }) => assert!(e.to_string().contains("is disabled, not dead"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }

    // Backwards: nothing skipped, no question. Forwards past undelivered events: the question,
    // refused unless confirmed, nothing moved; then confirmed.
    let back = change(Change::Rewind { to: RewindTo::Earliest });
    execute(&back, p, &audit("x"), Confirm::Refuse { fix: "confirm it" }).await.unwrap();
    assert_eq!(cursor(p).await, ("disabled".into(), 0), "a disabled shard stays disabled");
    let forward = change(Change::Rewind { to: RewindTo::Event(ids[2]) });
    let Ran::Previewed(skips) = run(&forward, p, &audit("x"), true, Confirm::Given).await.unwrap() else {
        panic!("a dry run previews")
    };
    assert_eq!(skips.iter().map(|s| s.events).sum::<i64>(), 2);
    match execute(&forward, p, &audit("x"), Confirm::Refuse { fix: "confirm it" }).await {
        Err(e @ Error::Refused { .. }) => {
            assert!(e.to_string().contains("rewind consumer c to event"), "{e}");
            assert!(e.to_string().contains("skipping 2 undelivered event(s)"), "{e}");
            assert!(e.to_string().ends_with("fix: confirm it"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(cursor(p).await.1, 0, "the refusal moved nothing");
    execute(&forward, p, &audit("skip them"), Confirm::Given).await.unwrap();
    assert_eq!(cursor(p).await.1, ids[1], "just before the target event");
    let latest = change(Change::Rewind { to: RewindTo::Latest });
    execute(&latest, p, &audit("x"), Confirm::Refuse { fix: "confirm it" }).await.unwrap();
    assert_eq!(cursor(p).await.1, ids[2], "latest skips by name: no question");

    let rebuild = Rebuild { consumer: "c".into() };
    assert!(rebuild.confirmation(&()).is_none(), "the CLI asks nothing before a rebuild");
    match execute(&rebuild, p, &audit("replay it"), Confirm::Given).await.unwrap() {
        highwater_store::ops::Rebuilt::Replaying { total, .. } => assert_eq!(total, 3),
        other => panic!("expected a replay from the start, got {other:?}"),
    }
    assert_eq!(cursor(p).await.1, 0, "rewound to the start");
    let unknown = Rebuild { consumer: "nope".into() };
    assert!(matches!(execute(&unknown, p, &audit("x"), Confirm::Given).await, Err(Error::NotFound { .. })));
}
