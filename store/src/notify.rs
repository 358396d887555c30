//! The notification channels between the store and the dispatchers. Both are wake-up hints only:
//! a dispatcher also polls, since a reconnect loses notifications.

/// Sent by the `highwater.events` trigger on every append.
pub const EVENTS_CHANNEL: &str = "highwater_events";
/// Sent when a consumer's definition or a shard's state changed (apply, ops commands, gc): the
/// dispatchers reload. The payload is the consumer's name.
pub const CONTROL_CHANNEL: &str = "highwater_control";

/// Tells the dispatchers that `consumer` changed; delivered when the caller's transaction commits.
pub async fn control<'c, E>(executor: E, consumer: &str) -> crate::Result<()>
where
    E: sqlx::PgExecutor<'c>,
{
    sqlx::query("SELECT pg_notify($1, $2)").bind(CONTROL_CHANNEL).bind(consumer).execute(executor).await?;
    Ok(())
}

/// A notification a [`Listener`] received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    pub channel: String,
    pub payload: String,
}

/// A LISTEN connection of its own (outside the pool's count), for the dispatcher's wake-ups and
/// the waiters of read-your-writes. It does not reconnect by itself: a lost connection ends
/// [`Listener::recv`], and the caller, which lost notifications meanwhile, connects again and
/// wakes everyone.
pub struct Listener(sqlx::postgres::PgListener);

impl Listener {
    /// A connection with the pool's options, listening on nothing yet.
    pub async fn connect(pool: &sqlx::PgPool) -> crate::Result<Listener> {
        let mut l = sqlx::postgres::PgListener::connect_with(pool).await?;
        l.eager_reconnect(false);
        Ok(Listener(l))
    }

    /// LISTENs on `channels`, in one round trip.
    pub async fn listen(&mut self, channels: &[&str]) -> crate::Result<()> {
        self.0.listen_all(channels.iter().copied()).await?;
        Ok(())
    }

    /// The next notification; `Ok(None)` or an error: the connection is gone.
    pub async fn recv(&mut self) -> crate::Result<Option<Notification>> {
        Ok(self
            .0
            .try_recv()
            .await?
            .map(|n| Notification { channel: n.channel().to_owned(), payload: n.payload().to_owned() }))
    }
}
