//! Appending events inside the caller's transaction, and the event as sinks see it.
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, value::RawValue};
use sqlx::{
    FromRow, PgConnection, Postgres, Row,
    postgres::{PgArguments, PgRow},
    query::QueryAs,
    types::Json,
};

use super::body::Body;
use crate::{Error, Position, Result, Xid8};

/// An event to append. `metadata.correlation_id` is filled in when absent.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NewEvent {
    pub stream_type: String,
    pub stream_id: String,
    pub event_type: String,
    pub payload: Value,
    #[serde(default)]
    pub metadata: Option<Value>,
    /// `None` is the system tenant.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// Optimistic concurrency: the stream's current version (0 for a new stream). The event then
    /// gets `expected_version + 1`, or the append fails with [`Error::VersionConflict`].
    #[serde(default)]
    pub expected_version: Option<i64>,
}

impl NewEvent {
    pub fn new(stream_type: &str, stream_id: &str, event_type: &str, payload: Value) -> Self {
        NewEvent {
            stream_type: stream_type.into(),
            stream_id: stream_id.into(),
            event_type: event_type.into(),
            payload,
            ..Default::default()
        }
    }
}

/// Appends `event` in the caller's transaction (pass `&mut *tx`) through `highwater.append`, the
/// same function other languages call, so every writer gets the same checks. Returns the id.
/// The event is delivered once that transaction commits; nothing is stored on error.
pub async fn append(conn: &mut PgConnection, event: &NewEvent) -> Result<i64> {
    let (id,): (i64,) = append_query("SELECT highwater.append($1, $2, $3, $4, $5, $6, $7)", event)
        .fetch_one(conn)
        .await
        .map_err(Error::from_append)?;
    Ok(id)
}

/// [`append`] of `event` as version `schema_version` of its type's schema (checked against that
/// version's schema and recorded with the event): the eight-argument `highwater.append`. An
/// unregistered version is `Error::UnknownEventType` (SQLSTATE HW004).
pub async fn append_version(conn: &mut PgConnection, event: &NewEvent, schema_version: i32) -> Result<i64> {
    let (id,): (i64,) = append_query("SELECT highwater.append($1, $2, $3, $4, $5, $6, $7, $8)", event)
        .bind(schema_version)
        .fetch_one(conn)
        .await
        .map_err(Error::from_append)?;
    Ok(id)
}

/// `sql` (a call of `highwater.append` or `highwater.append_position` with `$1`..`$7`) with
/// `event` bound in the functions' parameter order: stream type, stream id, event type, payload,
/// metadata, tenant, expected version.
pub(crate) fn append_query<'q, O>(sql: &'static str, event: &'q NewEvent) -> QueryAs<'q, Postgres, O, PgArguments>
where
    O: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql)
        .bind(&event.stream_type)
        .bind(&event.stream_id)
        .bind(&event.event_type)
        .bind(Json(&event.payload))
        .bind(event.metadata.as_ref().map(Json))
        .bind(&event.tenant_id)
        .bind(event.expected_version)
}

/// A committed event as delivered to a sink.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Event {
    pub id: i64,
    #[serde(skip)]
    pub tx_id: u64,
    pub stream_type: String,
    pub stream_id: String,
    pub stream_version: Option<i64>,
    pub event_type: String,
    pub tenant_id: Option<String>,
    pub payload: Body,
    pub metadata: Body,
    pub created_at: DateTime<Utc>,
}

impl Event {
    pub fn position(&self) -> Position {
        Position::new(self.tx_id, self.id)
    }

    pub fn correlation_id(&self) -> Option<String> {
        self.metadata.str_field("correlation_id")
    }
}

/// An event as one row of [`EVENT_COLUMNS`].
#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    id: i64,
    tx: Xid8,
    stream_type: String,
    stream_id: String,
    stream_version: Option<i64>,
    event_type: String,
    tenant_id: Option<String>,
    payload: Json<Box<RawValue>>,
    metadata: Json<Box<RawValue>>,
    created_at: DateTime<Utc>,
}

impl TryFrom<EventRow> for Event {
    type Error = Error;
    fn try_from(r: EventRow) -> Result<Event> {
        Ok(Event {
            id: r.id,
            tx_id: r.tx.0,
            stream_type: r.stream_type,
            stream_id: r.stream_id,
            stream_version: r.stream_version,
            event_type: r.event_type,
            tenant_id: r.tenant_id,
            payload: Body::from_raw(r.payload.0),
            metadata: Body::from_raw(r.metadata.0),
            created_at: r.created_at,
        })
    }
}

macro_rules! event_header_arrays {
    () => {
        "array_agg(e.id) AS ids, array_agg(e.tx_id) AS txs, array_agg(e.stream_type) AS stream_types, \
         array_agg(e.stream_id) AS stream_ids, array_agg(e.stream_version) AS stream_versions, \
         array_agg(e.event_type) AS event_types, array_agg(e.tenant_id) AS tenant_ids, \
         array_agg(e.created_at) AS created_ats"
    };
}

/// What a batch read returns of each event's body.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Bodies {
    /// No payload and metadata (a SQL sink reads the events server-side).
    None,
    /// Payload and metadata as stored.
    #[default]
    AsStored,
    /// Payloads through `highwater.upcast_for` with this choice (a consumer's `eventVersions`,
    /// [`highwater_crds::EventVersions::want`]), bound as the read's parameter `$7`.
    Upcast(serde_json::Value),
}

impl From<bool> for Bodies {
    fn from(bodies: bool) -> Bodies {
        if bodies { Bodies::AsStored } else { Bodies::None }
    }
}

impl Bodies {
    /// The bodies a consumer's sink reads: none for a sink that reads them itself, else as
    /// stored, or upcast when the consumer asks for versions (`want`).
    pub fn for_consumer(needs_bodies: bool, want: Option<serde_json::Value>) -> Bodies {
        match (needs_bodies, want) {
            (false, _) => Bodies::None,
            (true, None) => Bodies::AsStored,
            (true, Some(w)) => Bodies::Upcast(w),
        }
    }

    /// The choice to bind as `$7` when the read's text refers to it.
    pub(crate) fn want(&self) -> Option<&serde_json::Value> {
        match self {
            Bodies::Upcast(w) => Some(w),
            _ => None,
        }
    }
}

/// A batch's events as one array per column over the rows `e`, in the order they come: the
/// batch reads return one row per batch, not per event, so that the columns beside the events
/// (the shard row, the fence, the head) travel once and not once per event (a third of the
/// bytes of a 1,000-event read, and a row to decode per event; docs/bench/history.md). Without
/// bodies (a SQL sink reads the events server-side) `payloads` and `metadatas` are NULL. With
/// upcasts, each payload goes through `highwater.upcast_for` with the choice bound as `$7`; the
/// other forms are the same text as before versions existed, so their reads cost nothing more.
pub(crate) fn event_arrays(bodies: &Bodies) -> &'static str {
    match bodies {
        Bodies::AsStored => {
            concat!(event_header_arrays!(), ", array_agg(e.payload) AS payloads, array_agg(e.metadata) AS metadatas")
        }
        Bodies::None => concat!(event_header_arrays!(), ", NULL::jsonb[] AS payloads, NULL::jsonb[] AS metadatas"),
        Bodies::Upcast(_) => concat!(
            event_header_arrays!(),
            ", array_agg(highwater.upcast_for(e.event_type, e.schema_version, e.payload, $7::jsonb)) AS payloads, \
             array_agg(e.metadata) AS metadatas"
        ),
    }
}

type BodyArrays = Option<Vec<Json<Box<RawValue>>>>;

/// The next body of `bodies`, or `none` when the read carried none.
fn next_body(bodies: &mut Option<std::vec::IntoIter<Json<Box<RawValue>>>>, none: &Body) -> Body {
    bodies.as_mut().and_then(Iterator::next).map_or_else(|| none.clone(), |b| Body::from_raw(b.0))
}

/// The events of a row of [`event_arrays`], in its arrays' order; none when its arrays are NULL
/// (nothing was read). Without bodies, each payload is JSON null and each metadata empty.
pub(crate) fn events_from_arrays(row: &PgRow) -> Result<Vec<Event>> {
    let Some(ids) = row.try_get::<Option<Vec<i64>>, _>("ids")? else { return Ok(Vec::new()) };
    let txs: Vec<Xid8> = row.try_get("txs")?;
    let stream_types: Vec<String> = row.try_get("stream_types")?;
    let stream_ids: Vec<String> = row.try_get("stream_ids")?;
    let versions: Vec<Option<i64>> = row.try_get("stream_versions")?;
    let event_types: Vec<String> = row.try_get("event_types")?;
    let tenants: Vec<Option<String>> = row.try_get("tenant_ids")?;
    let created: Vec<DateTime<Utc>> = row.try_get("created_ats")?;
    let (payloads, metadatas): (BodyArrays, BodyArrays) = (row.try_get("payloads")?, row.try_get("metadatas")?);
    let n = ids.len();
    let lengths = [txs.len(), stream_types.len(), stream_ids.len(), versions.len(), event_types.len()];
    let bodies = [payloads.as_ref().map_or(n, Vec::len), metadatas.as_ref().map_or(n, Vec::len)];
    if lengths.into_iter().chain([tenants.len(), created.len()]).chain(bodies).any(|l| l != n) {
        return Err(Error::Internal(format!("a batch read returned columns of different lengths for {n} events")));
    }
    let header = |text: &str| Body::from_raw(RawValue::from_string(text.to_owned()).expect("valid JSON"));
    let (null, empty) = (header("null"), header("{}"));
    let mut payloads = payloads.map(Vec::into_iter);
    let mut metadatas = metadatas.map(Vec::into_iter);
    let columns = ids.into_iter().zip(txs).zip(stream_types).zip(stream_ids).zip(versions).zip(event_types);
    let rest = tenants.into_iter().zip(created);
    Ok(columns
        .zip(rest)
        .map(|((((((id, tx), stream_type), stream_id), stream_version), event_type), (tenant_id, created_at))| Event {
            id,
            tx_id: tx.0,
            stream_type,
            stream_id,
            stream_version,
            event_type,
            tenant_id,
            payload: next_body(&mut payloads, &null),
            metadata: next_body(&mut metadatas, &empty),
            created_at,
        })
        .collect())
}

/// Columns of [`EventRow`], for queries that read events.
pub(crate) const EVENT_COLUMNS: &str = "e.id, e.tx_id AS tx, e.stream_type, e.stream_id, \
     e.stream_version, e.event_type, e.tenant_id, e.payload, e.metadata, e.created_at";

/// Which events of a stream [`read_stream`] returns.
#[derive(Debug, Clone, Default)]
pub struct StreamRead {
    pub stream_type: String,
    pub stream_id: String,
    /// Only events created at or before this time (the stream as it was then).
    pub as_of: Option<DateTime<Utc>>,
    /// Only events up to this stream version (refused for a stream without versions).
    pub to_version: Option<i64>,
    /// Payloads upcast to the latest version of their type (`highwater.upcast`), as a consumer
    /// with `eventVersions: latest` reads them; else as stored.
    pub latest: bool,
}

/// A stream's committed events in delivery order, `(tx_id, id)`, which for a versioned stream is
/// version order (`events_order_after_previous_version`, docs/delivery.md): what a consumer is
/// delivered, and what an application loading an aggregate folds. Refuses a stream without any
/// event, and `to_version` for a stream without versions.
pub async fn read_stream(pool: &sqlx::PgPool, r: &StreamRead) -> Result<Vec<Event>> {
    let stream = format!("{}/{}", r.stream_type, r.stream_id);
    let (any, versioned): (bool, bool) = sqlx::query_as(
        "SELECT count(*) > 0, bool_or(stream_version IS NOT NULL) IS TRUE
           FROM highwater.events WHERE stream_type = $1 AND stream_id = $2",
    )
    .bind(&r.stream_type)
    .bind(&r.stream_id)
    .fetch_one(pool)
    .await?;
    if !any {
        return Err(Error::refused(format!("stream {stream} has no events (never appended to, or pruned)")).with_fix(
            "name it as STREAM_TYPE/STREAM_ID, exactly as appended (case matters): e.g. --stream order/o-17",
        ));
    }
    if let Some(v) = r.to_version {
        if !versioned {
            return Err(Error::refused(format!(
                "stream {stream} has no versions (its events were appended without expected_version): --to-version {v} cannot apply"
            ))
            .with_fix("use --as-of TIME, or read the whole stream"));
        }
        if v < 1 {
            return Err(Error::refused(format!("--to-version {v}: stream versions start at 1"))
                .with_fix("--to-version 1 or more"));
        }
    }
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT id, tx_id AS tx, stream_type, stream_id, stream_version, event_type, tenant_id,
                CASE WHEN $5 THEN highwater.upcast(event_type, schema_version, payload) ELSE payload END AS payload,
                metadata, created_at
           FROM highwater.events
          WHERE stream_type = $1 AND stream_id = $2
            AND ($3::timestamptz IS NULL OR created_at <= $3)
            AND ($4::bigint IS NULL OR stream_version <= $4)
          ORDER BY tx_id, id",
    )
    .bind(&r.stream_type)
    .bind(&r.stream_id)
    .bind(r.as_of)
    .bind(r.to_version)
    .bind(r.latest)
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(Event::try_from).collect()
}

#[cfg(test)]
mod bodies_tests {
    use super::*;

    /// Consumers without `eventVersions` read with the statement they read with before versions
    /// existed: no upcast is called, no parameter added.
    #[test]
    fn only_upcasting_reads_call_the_upcast() {
        for b in [Bodies::AsStored, Bodies::None, Bodies::from(true), Bodies::from(false)] {
            assert!(!event_arrays(&b).contains("upcast") && !event_arrays(&b).contains("$7"), "{b:?}");
            assert!(b.want().is_none());
        }
        let up = Bodies::for_consumer(true, Some(serde_json::json!({"*": "latest"})));
        assert!(
            event_arrays(&up).contains("highwater.upcast_for(e.event_type, e.schema_version, e.payload, $7::jsonb)")
        );
        assert_eq!(Bodies::for_consumer(false, Some(serde_json::json!({"*": "latest"}))), Bodies::None);
        assert_eq!(Bodies::for_consumer(true, None), Bodies::AsStored);
    }
}
