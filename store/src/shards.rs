//! Cursor rows (`highwater.consumer_shards`): registration, exclusive claims, reading a batch below
//! the snapshot fence, and moving the cursor.
use std::{str::FromStr, sync::LazyLock, time::Duration};

use chrono::{DateTime, Utc};
use highwater_crds::SHARED_INSTANCE;
use sqlx::{
    PgConnection, PgPool, Postgres, Row,
    pool::PoolConnection,
    postgres::{PgHasArrayType, PgTypeInfo},
};

use crate::{
    Error, Event, Position, Result, Xid8,
    events::{Bodies, event_arrays, events_from_arrays},
};

/// A shard's state: the `status` column (text, checked by the schema), decoded and bound as this
/// enum, never compared as a string: the store's statements take it as a parameter (`$n`), never
/// as a literal (docs/schema.md, "Shard states", lists where each one is set, SQL functions
/// included). No partial index names a state, so a bound state costs no plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, sqlx::Encode, sqlx::Decode)]
#[serde(rename_all = "lowercase")]
#[sqlx(rename_all = "lowercase")]
pub enum Status {
    /// Delivering normally (or caught up).
    Idle,
    /// The last attempt failed; the failing event is retried at `next_attempt_at`.
    Processing,
    /// Halted on a poison event after `maxAttempts`; an operator resumes it (ops commands: issue 3).
    Dead,
    /// Suspended by `consumer disable` or `spec.suspend`: nothing delivered, nothing lost.
    Disabled,
}

impl Status {
    /// Every status, for gauges that export one series per status.
    pub const ALL: [Status; 4] = [Status::Idle, Status::Processing, Status::Dead, Status::Disabled];

    /// The states a shard delivers in (`delivers()`), bound as `status = ANY($n)`.
    pub const DELIVERING: [Status; 2] = [Status::Idle, Status::Processing];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Idle => "idle",
            Status::Processing => "processing",
            Status::Dead => "dead",
            Status::Disabled => "disabled",
        }
    }

    pub fn delivers(self) -> bool {
        Self::DELIVERING.contains(&self)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that table columns (`{:<10}`) line up.
        f.pad(self.as_str())
    }
}

// `text` by its built-in OID (what `#[sqlx(type_name = "text")]` would look up by name, one
// catalog query per connection before the first statement that binds a state).
impl sqlx::Type<Postgres> for Status {
    fn type_info() -> PgTypeInfo {
        <&str as sqlx::Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as sqlx::Type<Postgres>>::compatible(ty)
    }
}

impl PgHasArrayType for Status {
    fn array_type_info() -> PgTypeInfo {
        <&str as PgHasArrayType>::array_type_info()
    }
}

impl FromStr for Status {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "idle" => Status::Idle,
            "processing" => Status::Processing,
            "dead" => Status::Dead,
            "disabled" => Status::Disabled,
            other => return Err(Error::Internal(format!("unknown shard status {other:?}"))),
        })
    }
}

#[derive(Clone, Debug)]
pub struct Shard {
    pub consumer: String,
    pub instance_id: String,
    pub cursor: Position,
    pub status: Status,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub failing_event_id: Option<i64>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Milliseconds until `next_attempt_at` by the database clock (negative when due).
    pub retry_in_ms: Option<i64>,
    /// Events after the cursor that the read model's bootstrap already saw: never delivered.
    pub skip: Vec<i64>,
    /// `(index, count)` for a partition of a Shared consumer.
    pub partition: Option<(i32, i32)>,
    /// While the consumer's partition count changes: the position this shard delivers up to.
    pub barrier: Option<Position>,
}

/// Creates the shard if it does not exist, at the consumer's start position: `earliest` is
/// before every event; `latest` is the newest event below the fence, so events of transactions
/// still running are delivered. For a Shared consumer, `SHARED_INSTANCE` stands for its split:
/// the one shard, or one per partition, created together when the consumer has none (later
/// splits are made by [`repartition`] only). Returns whether rows were created.
pub async fn register(conn: &mut PgConnection, consumer: &str, instance: &str, pod_uid: Option<&str>) -> Result<bool> {
    Ok(register_all(conn, &[(consumer, instance)], pod_uid).await? > 0)
}

/// [`register`] for many `(consumer, instance)` shards in one statement (a dispatcher's reload
/// makes sure all its shards exist: one round trip whatever the number of consumers). Returns
/// how many rows were created.
pub async fn register_all(conn: &mut PgConnection, shards: &[(&str, &str)], pod_uid: Option<&str>) -> Result<u64> {
    let (consumers, instances): (Vec<&str>, Vec<&str>) = shards.iter().copied().unzip();
    let r = sqlx::query(concat!(
        "INSERT INTO highwater.consumer_shards
                (consumer, instance_id, partition_index, partition_count, cursor_tx, cursor_id, status,
                 pod_uid, heartbeat_at)
         SELECT c.name, x.instance_id, x.part, x.parts, coalesce(h.tx_id, '0'::xid8), coalesce(h.id, 0),
                CASE WHEN c.suspended THEN $5 ELSE $6 END, $3, now()
           FROM unnest($1::text[], $2::text[]) AS w(consumer, instance_id)
           JOIN highwater.consumers c ON c.name = w.consumer
           -- The Shared split: created whole, and only while the consumer has no shared shard (a
           -- registration racing with a change of partitions must not bring an old split back).
           CROSS JOIN LATERAL (
                SELECT w.instance_id, NULL::integer AS part, NULL::integer AS parts
                 WHERE w.instance_id <> $4 OR c.partitions = 1
                UNION ALL
                SELECT highwater.partition_instance(g, c.partitions), g, c.partitions
                  FROM generate_series(0, c.partitions - 1) g
                 WHERE w.instance_id = $4 AND c.partitions > 1) x
           LEFT JOIN LATERAL (
                SELECT tx_id, id FROM highwater.events
                 WHERE c.start_from = 'latest' AND tx_id < ",
        fence!(),
        "
                 ORDER BY tx_id DESC, id DESC LIMIT 1) h ON true
          WHERE NOT (w.instance_id = $4 AND EXISTS (
                SELECT 1 FROM highwater.consumer_shards s
                 WHERE s.consumer = c.name AND highwater.is_shared_shard(s.instance_id)))
          ORDER BY c.name, x.instance_id
         ON CONFLICT (consumer, instance_id) DO NOTHING",
    ))
    .bind(consumers)
    .bind(instances)
    .bind(pod_uid)
    .bind(SHARED_INSTANCE)
    .bind(Status::Disabled)
    .bind(Status::Idle)
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

// `retry_in_ms` is computed by the database, whose clock also set `next_attempt_at`.
/// Registers the shard of a dispatcher pod for the operator, recording the pod's uid so that the
/// shard is removed when that pod is gone. A shard the dispatcher registered first (without a
/// uid), or one left by an earlier pod of the same name, is adopted by this pod.
pub async fn register_for_pod(conn: &mut PgConnection, consumer: &str, pod: &str, pod_uid: &str) -> Result<bool> {
    if register(conn, consumer, pod, Some(pod_uid)).await? {
        return Ok(true);
    }
    sqlx::query(
        "UPDATE highwater.consumer_shards SET pod_uid = $3, updated_at = now()
          WHERE consumer = $1 AND instance_id = $2 AND pod_uid IS DISTINCT FROM $3",
    )
    .bind(consumer)
    .bind(pod)
    .bind(pod_uid)
    .execute(conn)
    .await?;
    Ok(false)
}

pub(crate) const SHARD_COLUMNS: &str = "consumer, instance_id, cursor_tx, cursor_id, status, \
     attempts, last_error, failing_event_id, next_attempt_at, \
     (extract(epoch FROM next_attempt_at - now()) * 1000)::bigint AS retry_in_ms, \
     CASE WHEN cursor_tx < pg_snapshot_xmax(bootstrap_snapshot) THEN bootstrap_seen ELSE '{}' END AS skip, \
     partition_index, partition_count, barrier_tx, barrier_id";

/// The shard of a row of the shard columns (also the row the SQL sink's batch query returns,
/// `sql_sink`).
pub(crate) fn shard_from_row(r: &sqlx::postgres::PgRow) -> Result<Shard> {
    Ok(Shard {
        consumer: r.try_get("consumer")?,
        instance_id: r.try_get("instance_id")?,
        cursor: Position::from((r.try_get("cursor_tx")?, r.try_get("cursor_id")?)),
        status: r.try_get("status")?,
        attempts: r.try_get("attempts")?,
        last_error: r.try_get("last_error")?,
        failing_event_id: r.try_get("failing_event_id")?,
        next_attempt_at: r.try_get("next_attempt_at")?,
        retry_in_ms: r.try_get("retry_in_ms")?,
        skip: r.try_get("skip")?,
        partition: match (r.try_get::<Option<i32>, _>("partition_index")?, r.try_get("partition_count")?) {
            (Some(i), Some(n)) => Some((i, n)),
            _ => None,
        },
        barrier: match r.try_get::<Option<Xid8>, _>("barrier_tx")? {
            Some(tx) => Some(Position::from((tx, r.try_get("barrier_id")?))),
            None => None,
        },
    })
}

pub async fn load(conn: &mut PgConnection, consumer: &str, instance: &str) -> Result<Option<Shard>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {SHARD_COLUMNS} FROM highwater.consumer_shards WHERE consumer = $1 AND instance_id = $2"
    )))
    .bind(consumer)
    .bind(instance)
    .fetch_optional(conn)
    .await?;
    row.as_ref().map(shard_from_row).transpose()
}

pub async fn load_all(pool: &PgPool, consumer: Option<&str>) -> Result<Vec<Shard>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {SHARD_COLUMNS} FROM highwater.consumer_shards
          WHERE $1::text IS NULL OR consumer = $1 ORDER BY consumer, instance_id"
    )))
    .bind(consumer)
    .fetch_all(pool)
    .await?;
    rows.iter().map(shard_from_row).collect()
}

/// A session-level advisory lock on one shard, held on one pooled connection. Advisory locks
/// assign no transaction id, so holding one while a sink works never holds the fence back; and
/// the server drops it when the connection dies, so a killed process releases its shards.
pub struct ShardLock {
    conn: Option<PoolConnection<Postgres>>,
    key: String,
}

pub(crate) fn lock_key(consumer: &str, instance: &str) -> String {
    format!("highwater\u{1f}{consumer}\u{1f}{instance}")
}

/// Claims a shard without waiting; `None` when another process holds it.
pub async fn try_lock(pool: &PgPool, consumer: &str, instance: &str) -> Result<Option<ShardLock>> {
    let mut conn = pool.acquire().await?;
    let key = lock_key(consumer, instance);
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
        .bind(&key)
        .fetch_one(&mut *conn)
        .await?;
    Ok(got.then(|| ShardLock { conn: Some(conn), key }))
}

impl ShardLock {
    pub fn conn(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("connection held until release")
    }

    pub async fn release(mut self) -> Result<()> {
        let mut conn = self.conn.take().expect("released once");
        let r =
            sqlx::query("SELECT pg_advisory_unlock(hashtextextended($1, 0))").bind(&self.key).execute(&mut *conn).await;
        if r.is_err() {
            conn.close_on_drop();
        }
        r?;
        Ok(())
    }
}

impl Drop for ShardLock {
    fn drop(&mut self) {
        // Not released (an error or a cancelled pass): never hand a locked session back to the
        // pool; closing it drops the lock server-side.
        if let Some(c) = self.conn.as_mut() {
            c.close_on_drop();
        }
    }
}

/// What one read below the fence returns.
#[derive(Debug)]
pub struct Batch {
    /// Events after the cursor and below the fence, in `(tx_id, id)` order, filtered by type.
    pub events: Vec<Event>,
    /// The newest event below the fence, whatever its type.
    pub head: Option<Position>,
    /// `pg_snapshot_xmax`: no transaction id at or above it has been assigned yet.
    pub next_xid: u64,
}

/// The newest event below the fence `s.fence`, whatever its type.
pub(crate) const HEAD_LATERAL: &str = "LEFT JOIN LATERAL (
         SELECT tx_id, id FROM highwater.events
          WHERE tx_id < s.fence ORDER BY tx_id DESC, id DESC LIMIT 1) h ON true";

/// The fence and the next transaction id, from one snapshot.
pub(crate) fn fence_cte() -> String {
    format!("s AS MATERIALIZED (SELECT {} AS fence, pg_snapshot_xmax(pg_current_snapshot()) AS next)", fence!())
}

/// Reads up to `limit` events after `cursor` below the snapshot fence. The cursor is passed as
/// bind parameters so the row comparison is an index condition on `(tx_id, id)`; the fence, the
/// head and the events all come from one statement, hence one snapshot.
pub async fn read_batch(conn: &mut PgConnection, cursor: Position, types: &[String], limit: i64) -> Result<Batch> {
    let sql = format!(
        "WITH {s}
         SELECT s.next AS next_xid, h.tx_id AS head_tx, h.id AS head_id, b.*
           FROM s
           {HEAD_LATERAL}
           CROSS JOIN LATERAL (
                SELECT {arrays} FROM (
                    SELECT * FROM highwater.events e
                     WHERE (e.tx_id, e.id) > ($1, $2)
                       -- events is partitioned by tx_id (docs/operations.md). The plain lower
                       -- bound (implied by the row comparison) lets PostgreSQL skip the
                       -- partitions behind the cursor; the fence is the same expression as
                       -- s.fence (one statement, one snapshot), written out because a bound taken
                       -- from the outer row makes the plan parameterised, and PostgreSQL then
                       -- sorts every row after the cursor instead of reading the partitions in
                       -- order (58 ms instead of 0.6 ms per batch of 1,000 over 30 partitions).
                       AND e.tx_id >= $1
                       AND e.tx_id < {fence}
                       AND (cardinality($3::text[]) = 0 OR e.event_type = ANY($3))
                     ORDER BY e.tx_id, e.id
                     LIMIT $4) e) b",
        s = fence_cte(),
        fence = fence!(),
        arrays = event_arrays(&crate::events::Bodies::AsStored),
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(cursor.xid8())
        .bind(cursor.id)
        .bind(types)
        .bind(limit)
        .fetch_one(conn)
        .await?;
    batch_from_row(&row)
}

/// What a pass reads: the shard `consumer`/`instance`, up to `limit` events of `types` (all when
/// empty) after its cursor, with `bodies`.
pub struct ShardRead<'a> {
    pub consumer: &'a str,
    pub instance: &'a str,
    pub types: &'a [String],
    pub limit: i64,
    pub bodies: Bodies,
    /// Read also while the shard waits for a retry (its events are read though it is not due):
    /// for the side pass, which delivers other keys' events meanwhile without moving the cursor.
    /// A shard that does not deliver (dead, disabled) reads nothing either way.
    pub waiting: bool,
}

/// [`load`] and, when the shard is due for delivery (or `r.waiting`), [`read_batch`] from its
/// cursor, in one statement (one round trip, one snapshot). Call it while holding the shard's
/// claim ([`try_lock`]): the statement's snapshot is taken after the claim, so the cursor it
/// reads is the last one committed. The cursor reaches the index condition as a lateral
/// reference, which PostgreSQL turns into a parameter of the index scan. `None` when the shard
/// row is gone. Without bodies the events come without payload and metadata (see [`event_arrays`]).
pub async fn load_and_read(conn: &mut PgConnection, r: &ShardRead<'_>) -> Result<Option<(Shard, Batch)>> {
    let read = read_from(conn, r, None).await?;
    Ok(read.map(|r| (r.shard, r.batch)))
}

/// What [`read_from`] returns: the shard row as the statement saw it, and the batch it read.
pub(crate) struct Read {
    pub shard: Shard,
    pub batch: Batch,
    /// The row was due for delivery (the test below, made by the database); when not, nothing
    /// was read.
    pub due: bool,
    /// The events passed over (seen by a bootstrap) as computed for the read's start.
    pub skip: Vec<i64>,
}

/// [`load_and_read`] from `from` instead of the row's cursor when it is given (a read ahead of
/// the cursor, see [`crate::read_ahead`]); every other input of the read (due, passed-over
/// events, partition, barrier) comes from the row, as for a read at the cursor.
pub(crate) async fn read_from(
    conn: &mut PgConnection,
    r: &ShardRead<'_>,
    from: Option<Position>,
) -> Result<Option<Read>> {
    let ShardRead { consumer, instance, types, limit, ref bodies, waiting } = *r;
    let sql = format!(
        "WITH {s},
              sh AS MATERIALIZED (
                SELECT {SHARD_COLUMNS},
                       -- Due for delivery: 1, else 0 (nothing is read). The very test the pass
                       -- makes of `status` and `retry_in_ms`: a shard read empty while the pass
                       -- thinks it due would move its cursor past events.
                       CASE WHEN status = ANY ($8)
                                 AND ($9 OR coalesce((extract(epoch FROM next_attempt_at - now()) * 1000)::bigint, 0) <= 0)
                            THEN 1 ELSE 0 END AS due,
                       coalesce($5::xid8, cursor_tx) AS from_tx, coalesce($6::bigint, cursor_id) AS from_id,
                       CASE WHEN coalesce($5::xid8, cursor_tx) < pg_snapshot_xmax(bootstrap_snapshot)
                            THEN bootstrap_seen ELSE '{{}}' END AS from_skip
                  FROM highwater.consumer_shards WHERE consumer = $1 AND instance_id = $2)
         SELECT s.next AS next_xid, h.tx_id AS head_tx, h.id AS head_id, sh.*, b.*
           FROM s
           CROSS JOIN sh
           {HEAD_LATERAL}
           -- highwater.events_after (migration 20261201000020) rather than the read inline:
           -- with the cursor a lateral reference, PostgreSQL cannot read the partitions of
           -- highwater.events in order and sorts every row after the cursor. Same fence: the
           -- function is STABLE, it runs in this statement's snapshot.
           -- A partition, or a shard waiting at the barrier of a change of partitions, reads with
           -- highwater.shard_events_after; every other shard with events_after. The conditions on
           -- the shard row gate each branch (PostgreSQL runs only the one that applies).
           CROSS JOIN LATERAL (
                SELECT {arrays} FROM (
                    SELECT * FROM highwater.events_after(
                        sh.from_tx, sh.from_id, $3::text[], sh.due * $4::bigint,
                        -- Seen by the read model's bootstrap: passed like events of other types.
                        sh.from_skip) e
                     WHERE sh.partition_count IS NULL AND sh.barrier_tx IS NULL
                    UNION ALL
                    SELECT * FROM highwater.shard_events_after(
                        sh.from_tx, sh.from_id, $3::text[], sh.due * $4::bigint, sh.from_skip,
                        sh.partition_index, sh.partition_count, sh.barrier_tx, sh.barrier_id) e
                     WHERE sh.partition_count IS NOT NULL OR sh.barrier_tx IS NOT NULL) e) b
           -- No ORDER BY: each function returns its events in (tx_id, id) order, and
           -- batch_from_row checks it (and restores it, should a plan ever change it);
           -- sorting 1,000 wide rows here cost PostgreSQL about 0.4 ms a batch.
          ",
        s = fence_cte(),
        arrays = event_arrays(bodies),
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(consumer)
        .bind(instance)
        .bind(types)
        .bind(limit)
        .bind(from.map(|p| p.xid8()))
        .bind(from.map(|p| p.id))
        // `$7` of the upcasting form of event_arrays; the other forms do not read it (NULL).
        .bind(bodies.want().map(|want| sqlx::types::Json(want.clone())))
        .bind(&Status::DELIVERING[..])
        .bind(waiting)
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let shard = shard_from_row(&row)?;
    let due = row.try_get::<i32, _>("due")? == 1;
    let skip = row.try_get("from_skip")?;
    let mut batch = batch_from_row(&row)?;
    // A shard waiting at a barrier passes nothing beyond it: what lies there is the new split's.
    if let (Some(b), Some(h)) = (shard.barrier, batch.head)
        && h > b
    {
        batch.head = Some(b);
    }
    Ok(Some(Read { shard, batch, due, skip }))
}

/// Decodes the row of [`read_batch`] and [`load_and_read`]: the fence columns and the batch's
/// events as arrays ([`event_arrays`]).
pub(crate) fn batch_from_row(row: &sqlx::postgres::PgRow) -> Result<Batch> {
    let next_xid = row.try_get::<Xid8, _>("next_xid")?.0;
    let head = match row.try_get::<Option<Xid8>, _>("head_tx")? {
        Some(tx) => Some(Position::from((tx, row.try_get("head_id")?))),
        None => None,
    };
    let mut events = events_from_arrays(row)?;
    // Delivery order is (tx_id, id); a statement without ORDER BY gives no promise of it.
    if !events.is_sorted_by_key(Event::position) {
        events.sort_by_key(Event::position);
    }
    Ok(Batch { events, head, next_xid })
}

/// Moves the cursor from `from` to `to` after a successful delivery and clears any failure.
/// Conditional on the cursor still being at `from` and the shard still delivering, so a
/// concurrent change by an operator (or a deletion) wins over a pass that started before it.
/// Returns the row as the update left it, `None` when the update was refused.
pub async fn advance(
    conn: &mut PgConnection,
    shard: &Shard,
    from: Position,
    to: Position,
    delivered: i64,
) -> Result<Option<Shard>> {
    Advance { shard, from, to, delivered }.run(conn).await
}

/// A cursor move as a value, for a caller that runs it inside a statement of its own (the SQL
/// sink's batch, `sql_sink`, sends it with its apply call: the batch and the move in one round
/// trip).
pub struct Advance<'a> {
    pub shard: &'a Shard,
    pub from: Position,
    pub to: Position,
    pub delivered: i64,
}

impl Advance<'_> {
    /// The move's UPDATE with `gate`, a condition of the caller's, added to its WHERE clause, and
    /// its values written in as constants (escaped as libpq escapes them), for a caller that
    /// sends it in a simple query.
    pub(crate) fn inline(&self, gate: &str) -> String {
        use postgres_protocol::escape::escape_literal;
        let s = self.shard;
        Self::update(
            [
                escape_literal(&s.consumer),
                escape_literal(&s.instance_id),
                format!("'{}'::xid8", self.to.tx),
                self.to.id.to_string(),
                format!("'{}'::xid8", self.from.tx),
                self.from.id.to_string(),
                self.delivered.to_string(),
                escape_literal(Status::Idle.as_str()),
                format!("ARRAY[{}]", Status::DELIVERING.map(|s| escape_literal(s.as_str())).join(", ")),
            ],
            gate,
        )
    }

    fn update(values: [String; 9], gate: &str) -> String {
        let [consumer, instance, to_tx, to_id, from_tx, from_id, delivered, idle, delivering] = values;
        format!(
            "UPDATE highwater.consumer_shards
                SET cursor_tx = {to_tx}, cursor_id = {to_id}, status = {idle}, attempts = 0,
                    last_error = NULL, failing_event_id = NULL, next_attempt_at = NULL,
                    delivered_count = delivered_count + {delivered}, heartbeat_at = now(), updated_at = now()
              WHERE consumer = {consumer} AND instance_id = {instance}
                AND cursor_tx = {from_tx} AND cursor_id = {from_id}
                AND status = ANY ({delivering})
                AND (barrier_tx IS NULL OR ({to_tx}, {to_id}) <= (barrier_tx, barrier_id))
                AND ({gate})
             RETURNING {SHARD_COLUMNS}"
        )
    }

    /// The move on its own: the shard row after it, or `None` when it was refused.
    pub async fn run(&self, conn: &mut PgConnection) -> Result<Option<Shard>> {
        static SQL: LazyLock<String> =
            LazyLock::new(|| Advance::update(std::array::from_fn(|i| format!("${}", i + 1)), "true"));
        let s = self.shard;
        let row = sqlx::query(sqlx::AssertSqlSafe(&**SQL))
            .bind(&s.consumer)
            .bind(&s.instance_id)
            .bind(self.to.xid8())
            .bind(self.to.id)
            .bind(self.from.xid8())
            .bind(self.from.id)
            .bind(self.delivered)
            .bind(Status::Idle)
            .bind(&Status::DELIVERING[..])
            .fetch_optional(conn)
            .await?;
        row.as_ref().map(shard_from_row).transpose()
    }
}

/// What a failed attempt leaves behind.
#[derive(Debug, Clone)]
pub struct Failure {
    pub event: Event,
    pub error: String,
    /// Cursor after the events delivered before the failing one.
    pub cursor: Position,
    pub delivered: i64,
    pub attempts: i32,
    pub outcome: FailureOutcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureOutcome {
    /// Retry the event after this delay.
    Retry(Duration),
    /// `maxAttempts` reached in halt mode: the shard goes dead.
    Dead,
    /// `maxAttempts` reached in skip mode: park the event and move past it.
    Park,
}

/// Records a failed attempt (and any progress before it) in one conditional statement.
pub async fn record_failure(conn: &mut PgConnection, shard: &Shard, from: Position, f: &Failure) -> Result<bool> {
    let error: String = f.error.chars().take(2000).collect();
    let (status, cursor, retry_ms) = match f.outcome {
        FailureOutcome::Retry(d) => (Status::Processing, f.cursor, Some(d.as_millis() as i64)),
        FailureOutcome::Dead => (Status::Dead, f.cursor, None),
        FailureOutcome::Park => (Status::Idle, f.event.position(), None),
    };
    let parked = f.outcome == FailureOutcome::Park;
    let r = sqlx::query(
        "WITH upd AS (
            UPDATE highwater.consumer_shards
               SET cursor_tx = $3, cursor_id = $4, status = $7,
                   attempts = CASE WHEN $12 THEN 0 ELSE $8 END,
                   last_error = CASE WHEN $12 THEN NULL ELSE $9 END,
                   failing_event_id = CASE WHEN $12 THEN NULL ELSE $10 END,
                   next_attempt_at = now() + make_interval(secs => $11::float8 / 1000),
                   delivered_count = delivered_count + $13,
                   heartbeat_at = now(), updated_at = now()
             WHERE consumer = $1 AND instance_id = $2
               AND cursor_tx = $5 AND cursor_id = $6
               AND status = ANY ($14)
               AND (barrier_tx IS NULL OR ($3, $4) <= (barrier_tx, barrier_id))
            RETURNING consumer, instance_id),
         parked AS (
            INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error)
            SELECT consumer, instance_id, $10, $8, $9 FROM upd WHERE $12
            ON CONFLICT DO NOTHING)
         SELECT count(*) FROM upd",
    )
    .bind(&shard.consumer)
    .bind(&shard.instance_id)
    .bind(cursor.xid8())
    .bind(cursor.id)
    .bind(from.xid8())
    .bind(from.id)
    .bind(status)
    .bind(f.attempts)
    .bind(&error)
    .bind(f.event.id)
    .bind(retry_ms)
    .bind(parked)
    .bind(f.delivered)
    .bind(&Status::DELIVERING[..])
    .fetch_one(conn)
    .await?;
    Ok(r.try_get::<i64, _>(0)? == 1)
}

/// `errorMode: skipStream`: the streams of the shard that a dead letter blocks (one that is not
/// redriven yet, pending redrives included; a discarded one no longer blocks), each with the event id of its first blocking dead
/// letter (the one the later events are parked behind).
pub async fn blocked_streams(
    conn: &mut PgConnection,
    shard: &Shard,
) -> Result<std::collections::HashMap<(String, String), i64>> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT e.stream_type, e.stream_id, min(coalesce(d.blocked_by, d.event_id))
           FROM highwater.dead_letters d
           JOIN highwater.events e ON e.id = d.event_id
          WHERE d.consumer = $1 AND d.instance_id = $2 AND d.redriven_at IS NULL AND d.discarded_at IS NULL
          GROUP BY e.stream_type, e.stream_id",
    )
    .bind(&shard.consumer)
    .bind(&shard.instance_id)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|(t, i, by)| ((t, i), by)).collect())
}

/// Parks `event` without delivering it, behind the dead letter of event `blocked_by` of its stream
/// (`errorMode: skipStream`), and moves the cursor past it, in one conditional statement (false:
/// the shard changed meanwhile, nothing done).
pub async fn park_blocked(conn: &mut PgConnection, shard: &Shard, event: &Event, blocked_by: i64) -> Result<bool> {
    let to = event.position();
    let r = sqlx::query(
        "WITH upd AS (
            UPDATE highwater.consumer_shards
               SET cursor_tx = $3, cursor_id = $4, status = $9, attempts = 0, last_error = NULL,
                   failing_event_id = NULL, next_attempt_at = NULL, heartbeat_at = now(), updated_at = now()
             WHERE consumer = $1 AND instance_id = $2
               AND cursor_tx = $5 AND cursor_id = $6
               AND status = ANY ($10)
               AND (barrier_tx IS NULL OR ($3, $4) <= (barrier_tx, barrier_id))
            RETURNING consumer, instance_id),
         parked AS (
            INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error, blocked_by)
            SELECT consumer, instance_id, $7, 0, 'stream blocked by dead letter ' || $8, $8 FROM upd
            ON CONFLICT DO NOTHING)
         SELECT count(*) FROM upd",
    )
    .bind(&shard.consumer)
    .bind(&shard.instance_id)
    .bind(to.xid8())
    .bind(to.id)
    .bind(shard.cursor.xid8())
    .bind(shard.cursor.id)
    .bind(event.id)
    .bind(blocked_by)
    .bind(Status::Idle)
    .bind(&Status::DELIVERING[..])
    .fetch_one(conn)
    .await?;
    Ok(r.try_get::<i64, _>(0)? == 1)
}

/// Refuses when a cursor of a dispatcher's shards (its group's shared ones and its own) is ahead
/// of the database's transaction counter: after a logical dump and restore, transaction ids
/// restart below stored cursors, and delivering would skip every event until the counter caught
/// up.
pub async fn refuse_cursors_ahead(pool: &PgPool, group: &str, instance: &str) -> Result<()> {
    let ahead: Vec<(String, String, Xid8, Xid8)> = sqlx::query_as(
        "SELECT consumer, instance_id, cursor_tx, pg_snapshot_xmax(pg_current_snapshot())
           FROM highwater.consumer_shards s
           JOIN highwater.consumers c ON c.name = s.consumer AND c.consumer_group = $2
          WHERE (s.instance_id = $1 OR highwater.is_shared_shard(s.instance_id))
            AND s.cursor_tx >= pg_snapshot_xmax(pg_current_snapshot())",
    )
    .bind(instance)
    .bind(group)
    .fetch_all(pool)
    .await?;
    match ahead.first() {
        None => Ok(()),
        Some((.., next)) => {
            Err(cursors_ahead(ahead.iter().map(|(c, i, tx, _)| (c.as_str(), i.as_str(), tx.0)), next.0))
        }
    }
}

/// The one refusal for cursors ahead of the next transaction id `next_xid`, at start-up and
/// in a pass: `(consumer, instance, cursor transaction)` of each.
pub fn cursors_ahead<'a>(shards: impl IntoIterator<Item = (&'a str, &'a str, u64)>, next_xid: u64) -> Error {
    let list: Vec<String> = shards.into_iter().map(|(c, i, tx)| format!("{c}/{i} (cursor transaction {tx})")).collect();
    Error::refused(format!(
        "refusing to deliver: cursors are ahead of the database's next transaction id ({next_xid}): {}.\n  \
         The database was probably restored from a logical dump, which restarts transaction ids; \
         delivering now would skip events.",
        list.join(", ")
    ))
    .with_fix("see \"Restore from a logical dump\" in docs/delivery.md")
}

/// Records why a consumer cannot run here (a sink that cannot be built, say) where `consumer
/// status` shows it; the cursor and attempts are untouched, and the next delivery clears it.
pub async fn note_error(pool: &PgPool, consumer: &str, instance: &str, error: &str) -> Result<()> {
    let error: String = error.chars().take(2000).collect();
    sqlx::query(
        "UPDATE highwater.consumer_shards SET last_error = $3, updated_at = now()
          WHERE consumer = $1 AND last_error IS DISTINCT FROM $3
            AND (instance_id = $2 OR ($2 = $4 AND highwater.is_shared_shard(instance_id)))",
    )
    .bind(consumer)
    .bind(instance)
    .bind(&error)
    .bind(SHARED_INSTANCE)
    .execute(pool)
    .await?;
    Ok(())
}

/// Clears an error [`note_error`] wrote, once the shard's passes work again. Only an idle
/// shard's: a processing or dead shard's error is its failing event's, which only a delivery or an
/// ops command clears.
pub async fn clear_noted_error(pool: &PgPool, consumer: &str, instance: &str) -> Result<()> {
    sqlx::query(
        "UPDATE highwater.consumer_shards SET last_error = NULL, updated_at = now()
          WHERE consumer = $1 AND status = $4 AND last_error IS NOT NULL
            AND (instance_id = $2 OR ($2 = $3 AND highwater.is_shared_shard(instance_id)))",
    )
    .bind(consumer)
    .bind(instance)
    .bind(SHARED_INSTANCE)
    .bind(Status::Idle)
    .execute(pool)
    .await?;
    Ok(())
}

/// Marks this instance's shards alive, for `consumer gc` outside Kubernetes.
pub async fn heartbeat(pool: &PgPool, instance: &str) -> Result<()> {
    sqlx::query("UPDATE highwater.consumer_shards SET heartbeat_at = now() WHERE instance_id = $1")
        .bind(instance)
        .execute(pool)
        .await?;
    Ok(())
}

/// The shards of Shared consumers among `consumers`, `(consumer, instance)` in order: one per
/// consumer, or one per partition.
pub async fn shared_shards(pool: &PgPool, consumers: &[&str]) -> Result<Vec<(String, String)>> {
    Ok(sqlx::query_as(
        "SELECT consumer, instance_id FROM highwater.consumer_shards
          WHERE consumer = ANY ($1) AND highwater.is_shared_shard(instance_id)
          ORDER BY consumer, partition_index NULLS FIRST",
    )
    .bind(consumers)
    .fetch_all(pool)
    .await?)
}

/// Where a change of a Shared consumer's partition count stands (`highwater.repartition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repartition {
    /// The shards carry the target split.
    None,
    /// The old split delivers up to its barrier.
    Pending,
    /// The new split replaced the old one at the barrier.
    Switched,
}

/// Moves the consumer towards its target split; with `refuse_dead` (an apply), refuses while a
/// shard is dead (`HW020`, with the dead shards and the fix).
pub async fn repartition(conn: &mut PgConnection, consumer: &str, refuse_dead: bool) -> Result<Repartition> {
    let r: String = sqlx::query_scalar("SELECT highwater.repartition($1, $2)")
        .bind(consumer)
        .bind(refuse_dead)
        .fetch_one(conn)
        .await
        .map_err(|e| match e.as_database_error() {
            Some(d) if d.code().as_deref() == Some("HW020") => {
                let hint = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().and_then(|p| p.hint());
                let err = Error::refused(d.message().to_owned());
                match hint {
                    Some(h) => err.with_fix(h.to_owned()),
                    None => err,
                }
            }
            _ => e.into(),
        })?;
    Ok(match r.as_str() {
        "pending" => Repartition::Pending,
        "switched" => Repartition::Switched,
        _ => Repartition::None,
    })
}
