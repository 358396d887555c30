//! Appending events inside the caller's transaction, and the event as sinks see it.
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, value::RawValue};
use sqlx::{
    FromRow, PgConnection, Postgres,
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

#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    pub id: i64,
    pub tx: Xid8,
    pub stream_type: String,
    pub stream_id: String,
    pub stream_version: Option<i64>,
    pub event_type: String,
    pub tenant_id: Option<String>,
    pub payload: Json<Box<RawValue>>,
    pub metadata: Json<Box<RawValue>>,
    pub created_at: DateTime<Utc>,
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

/// Columns of [`EventRow`] without the bodies: `payload` is JSON null and `metadata` empty, for
/// readers that never look at them (a SQL sink reads the events server-side).
pub(crate) const EVENT_HEADER_COLUMNS: &str = "e.id, e.tx_id AS tx, e.stream_type, e.stream_id, \
     e.stream_version, e.event_type, e.tenant_id, 'null'::jsonb AS payload, '{}'::jsonb AS metadata, e.created_at";

/// Columns of [`EventRow`], for queries that read events.
pub(crate) const EVENT_COLUMNS: &str = "e.id, e.tx_id AS tx, e.stream_type, e.stream_id, \
     e.stream_version, e.event_type, e.tenant_id, e.payload, e.metadata, e.created_at";
