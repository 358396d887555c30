//! Wake-ups: one LISTEN connection and one cheap head query per dispatcher, whatever the number
//! of consumers. NOTIFY is only a hint (a reconnect loses notifications), so the head is also
//! polled: fast while the listener is down or committed events wait above the fence, slowly
//! otherwise.
use std::{sync::Arc, time::Duration};

use sqlx::{PgPool, Row, postgres::PgListener};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::{Position, Result, Xid8};

pub use crate::notify::{CONTROL_CHANNEL, EVENTS_CHANNEL};

/// The newest event below the fence, and whether committed events wait above it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Head {
    pub position: Option<Position>,
    pub pending_above_fence: bool,
}

pub async fn read_head(pool: &PgPool) -> Result<Head> {
    let row = sqlx::query(concat!(
        "WITH s AS MATERIALIZED (SELECT ",
        fence!(),
        " AS fence)
         SELECT h.tx_id AS tx, h.id,
                EXISTS (SELECT 1 FROM highwater.events WHERE tx_id >= s.fence) AS pending
           FROM s
           LEFT JOIN LATERAL (SELECT tx_id, id FROM highwater.events WHERE tx_id < s.fence
                               ORDER BY tx_id DESC, id DESC LIMIT 1) h ON true",
    ))
    .fetch_one(pool)
    .await?;
    let position = match row.try_get::<Option<Xid8>, _>("tx")? {
        Some(tx) => Some(Position::from((tx, row.try_get("id")?))),
        None => None,
    };
    Ok(Head { position, pending_above_fence: row.try_get("pending")? })
}

pub struct Signals {
    pub events: Arc<Notify>,
    pub control: watch::Sender<u64>,
    pub listening: watch::Sender<bool>,
}

/// Forwards notifications until `stop`; reconnects (and wakes everyone, since notifications were
/// lost meanwhile) when the connection drops.
pub async fn listen(pool: PgPool, signals: Arc<Signals>, stop: CancellationToken) {
    let mut delay = Duration::from_millis(100);
    while !stop.is_cancelled() {
        let mut listener = match connect(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "LISTEN connection failed; polling meanwhile");
                tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
                delay = (delay * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        delay = Duration::from_millis(100);
        signals.listening.send_replace(true);
        signals.events.notify_one();
        signals.control.send_modify(|g| *g += 1);
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                n = listener.try_recv() => n,
            };
            match next {
                Ok(Some(n)) if n.channel() == CONTROL_CHANNEL => signals.control.send_modify(|g| *g += 1),
                Ok(Some(_)) => signals.events.notify_one(),
                Ok(None) | Err(_) => break,
            }
        }
        signals.listening.send_replace(false);
        tracing::warn!("LISTEN connection lost; reconnecting, polling meanwhile");
    }
}

async fn connect(pool: &PgPool) -> Result<PgListener> {
    let mut l = PgListener::connect_with(pool).await?;
    l.eager_reconnect(false);
    l.listen_all([EVENTS_CHANNEL, CONTROL_CHANNEL]).await?;
    Ok(l)
}

/// Publishes the head whenever it may have moved.
pub async fn poll_head(
    pool: PgPool,
    signals: Arc<Signals>,
    head_tx: watch::Sender<Head>,
    fast: Duration,
    idle: Duration,
    stop: CancellationToken,
) {
    let listening = signals.listening.subscribe();
    loop {
        let pending = match read_head(&pool).await {
            Ok(h) => {
                head_tx.send_if_modified(|cur| std::mem::replace(cur, h) != h);
                h.pending_above_fence
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the event head failed");
                true
            }
        };
        let wait = if pending || !*listening.borrow() { fast } else { idle };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            _ = signals.events.notified() => {}
        }
    }
}
