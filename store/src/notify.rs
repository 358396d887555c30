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
