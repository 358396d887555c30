//! Server-sent events: the `sse` sink hands each delivered event to the clients connected to this
//! dispatcher instance; a client that reconnects with `Last-Event-ID` first gets what it missed
//! from the events table.
use std::{collections::HashMap, convert::Infallible, sync::Arc};

use async_trait::async_trait;
use axum::{
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event as SseEvent, KeepAlive, Sse},
    },
};
use futures::{Stream, StreamExt, stream};
use highwater_store::pg::PgPool;
use serde::Deserialize;
use tokio::sync::{RwLock, broadcast};

use crate::sink::{DeliveryContext, ExternalSink, Sink, SinkError};
use highwater_store::{
    Event, Position, Result,
    tail::{self, position_of},
};

pub const DEFAULT_BUFFER: usize = 1024;

/// What one SSE consumer runs here: its live channel and its event-type filter.
#[derive(Clone)]
struct Channel {
    tx: broadcast::Sender<Arc<Event>>,
    event_types: Vec<String>,
    /// The consumer's `eventVersions` (`EventVersions::want`): the replay upcasts as the
    /// consumer's batch reads do.
    want: Option<serde_json::Value>,
}

/// The SSE consumers of this process.
#[derive(Default)]
pub struct Hub {
    channels: RwLock<HashMap<String, Channel>>,
}

impl Hub {
    /// Registers (or re-registers after a definition change) a consumer; returns its sink.
    pub async fn sink(
        self: &Arc<Self>,
        consumer: &str,
        event_types: &[String],
        want: Option<serde_json::Value>,
        buffer: usize,
    ) -> Sink {
        let mut map = self.channels.write().await;
        let tx = match map.get(consumer) {
            Some(c) => c.tx.clone(),
            None => broadcast::channel(buffer.max(1)).0,
        };
        map.insert(consumer.to_owned(), Channel { tx: tx.clone(), event_types: event_types.to_vec(), want });
        Sink::External(Arc::new(SseSink { tx }))
    }

    pub async fn remove(&self, consumer: &str) {
        self.channels.write().await.remove(consumer);
    }

    async fn channel(&self, consumer: &str) -> Option<Channel> {
        self.channels.read().await.get(consumer).cloned()
    }
}

/// Acknowledges as soon as the events are handed to the connected clients: it never waits for
/// a client, so a slow one cannot hold delivery back (it is dropped when its buffer overflows).
struct SseSink {
    tx: broadcast::Sender<Arc<Event>>,
}

#[async_trait]
impl ExternalSink for SseSink {
    fn kind(&self) -> &'static str {
        "sse"
    }

    async fn deliver(&self, _ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        for ev in events {
            // An error only means nobody is connected; they resume from the table.
            let _ = self.tx.send(Arc::new(ev.clone()));
        }
        Ok(())
    }
}

/// Bearer tokens that may connect; none configured means nobody may.
#[derive(Default, Clone)]
pub struct Tokens(Vec<String>);

impl Tokens {
    /// From `HIGHWATER_SSE_TOKENS` (comma-separated) and/or a file with one token per line.
    pub fn load(env: Option<&str>, file: Option<&std::path::Path>) -> Result<Self> {
        Self::load_named("SSE", env, file)
    }

    /// [`Tokens::load`] for the tokens of `what` (named in a read error).
    pub fn load_named(what: &str, env: Option<&str>, file: Option<&std::path::Path>) -> Result<Self> {
        Ok(Tokens(highwater_ops::load_tokens(what, env, file)?))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn allows(&self, headers: &HeaderMap) -> bool {
        self.which(headers).is_some()
    }

    /// The position in the list of the token the request presents, if it is one of them.
    pub(crate) fn which(&self, headers: &HeaderMap) -> Option<usize> {
        let given =
            headers.get(header::AUTHORIZATION).and_then(|h| h.to_str().ok()).and_then(|h| h.strip_prefix("Bearer "))?;
        // Compare every token fully so timing says nothing about which prefix matched.
        self.0.iter().enumerate().fold(None, |found, (i, t)| {
            if constant_time_eq(t.as_bytes(), given.trim().as_bytes()) { found.or(Some(i)) } else { found }
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Parses `Last-Event-ID`: an event id, as this server sends them.
pub fn parse_last_event_id(value: &str) -> Option<i64> {
    let v = value.trim();
    if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

#[derive(Clone)]
pub struct SseState {
    pub hub: Arc<Hub>,
    pub tokens: Tokens,
    pub pool: PgPool,
}

#[derive(Deserialize)]
pub struct StreamQuery {
    tenant: Option<String>,
}

const REPLAY_PAGE: i64 = 500;

fn to_sse(ev: &Event) -> SseEvent {
    let data = serde_json::to_string(ev).unwrap_or_else(|_| "{}".into());
    SseEvent::default().id(ev.id.to_string()).event(ev.event_type.clone()).data(data)
}

/// `GET /v1/consumers/{name}/events`
pub async fn stream_handler(
    State(st): State<SseState>,
    Path(name): Path<String>,
    Query(q): Query<StreamQuery>,
    headers: HeaderMap,
) -> Response {
    if !st.tokens.allows(&headers) {
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or unknown bearer token\n")
            .into_response();
    }
    let Some(channel) = st.hub.channel(&name).await else {
        return (StatusCode::NOT_FOUND, format!("no sse consumer named {name:?} runs on this instance\n"))
            .into_response();
    };
    let last = match headers.get("last-event-id").map(|h| h.to_str().unwrap_or("")) {
        None => None,
        Some(v) => match parse_last_event_id(v) {
            Some(id) => Some(id),
            None => return (StatusCode::BAD_REQUEST, "Last-Event-ID must be an event id (digits)\n").into_response(),
        },
    };
    // Subscribe before reading the table, so nothing falls between the replay and the live feed.
    let rx = channel.tx.subscribe();
    let start = match last {
        None => None,
        // Bounded like /readyz: a database that does not answer is a 503, not a hanging request.
        Some(id) => match tokio::time::timeout(std::time::Duration::from_secs(5), position_of(&st.pool, id)).await {
            Ok(Ok(Some(p))) => Some(p),
            Ok(Ok(None)) => {
                return (StatusCode::BAD_REQUEST, format!("Last-Event-ID {id} is not a known event\n")).into_response();
            }
            Ok(Err(e)) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
            Err(_) => {
                return (StatusCode::SERVICE_UNAVAILABLE, "the database did not answer within 5s\n").into_response();
            }
        },
    };
    let tenant = q.tenant;
    let replay = replay(st.pool.clone(), start, channel.event_types.clone(), channel.want.clone(), tenant.clone());
    let live = live(rx, tenant);
    // Live events already sent by the replay are skipped by position.
    let mut sent: Option<Position> = start;
    let merged = replay.map(Ok::<Event, Event>).chain(live.map(Err)).filter_map(move |item| {
        let out = match item {
            Ok(ev) => {
                sent = Some(ev.position());
                Some(Ok::<_, Infallible>(to_sse(&ev)))
            }
            Err(ev) => {
                if sent.is_some_and(|s| ev.position() <= s) {
                    None
                } else {
                    sent = Some(ev.position());
                    Some(Ok(to_sse(&ev)))
                }
            }
        };
        futures::future::ready(out)
    });
    Sse::new(merged).keep_alive(KeepAlive::default()).into_response()
}

/// Events after `start` below the fence, page by page; empty without `start`.
fn replay(
    pool: PgPool,
    start: Option<Position>,
    types: Vec<String>,
    want: Option<serde_json::Value>,
    tenant: Option<String>,
) -> impl Stream<Item = Event> {
    let filter = tail::Filter { types, tenant, want };
    stream::unfold(start, move |cursor| {
        let (pool, filter) = (pool.clone(), filter.clone());
        async move {
            let cursor = cursor?;
            let events = tail::page(&pool, cursor, &filter, REPLAY_PAGE)
                .await
                .inspect_err(|e| tracing::warn!(error = %e, "SSE replay failed; the client resumes on reconnect"))
                .ok()?;
            let next = if (events.len() as i64) < REPLAY_PAGE { None } else { events.last().map(Event::position) };
            if events.is_empty() {
                return None;
            }
            Some((stream::iter(events), next))
        }
    })
    .flatten()
}

/// The live feed; ends (disconnecting the client) when the client fell `buffer` events behind.
fn live(rx: broadcast::Receiver<Arc<Event>>, tenant: Option<String>) -> impl Stream<Item = Event> {
    stream::unfold(rx, move |mut rx| {
        let tenant = tenant.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok(ev) if tenant.is_none() || ev.tenant_id == tenant => return Some(((*ev).clone(), rx)),
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::info!(missed = n, "SSE client too slow: disconnected; it resumes with Last-Event-ID");
                        return None;
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_event_id_is_digits_only() {
        assert_eq!(parse_last_event_id(" 42 "), Some(42));
        for bad in ["", "-1", "4x", "99999999999999999999", "1e3", "0x10"] {
            assert_eq!(parse_last_event_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn tokens_need_an_exact_bearer_match() {
        let t = Tokens::load(Some("alpha, beta"), None).unwrap();
        let mut h = HeaderMap::new();
        assert!(!t.allows(&h));
        h.insert(header::AUTHORIZATION, "Bearer beta".parse().unwrap());
        assert!(t.allows(&h));
        h.insert(header::AUTHORIZATION, "Bearer bet".parse().unwrap());
        assert!(!t.allows(&h));
        h.insert(header::AUTHORIZATION, "Basic beta".parse().unwrap());
        assert!(!t.allows(&h));
        assert!(!Tokens::default().allows(&h));
    }
}
