//! Which dispatchers sleep until a writer notifies them (`highwater.sleepers`). The events
//! trigger sends `NOTIFY highwater_events` only while some row's lease runs; see the migration
//! `20261202000010_notify_sleepers.sql` for why, and `dispatch::wakeup` for the protocol that
//! keeps a writer that saw nobody asleep from being missed.
use std::time::Duration;

use sqlx::PgPool;

use crate::Result;

/// Marks `instance` asleep for `lease`. Writers that start their trigger's query after this
/// commits notify.
pub async fn sleep(pool: &PgPool, instance: &str, lease: Duration) -> Result<()> {
    sqlx::query(
        "INSERT INTO highwater.sleepers (instance_id, asleep_until) VALUES ($1, now() + make_interval(secs => $2))
         ON CONFLICT (instance_id) DO UPDATE SET asleep_until = EXCLUDED.asleep_until",
    )
    .bind(instance)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

/// Marks `instance` awake: writers stop notifying on its account.
pub async fn wake(pool: &PgPool, instance: &str) -> Result<()> {
    sqlx::query("UPDATE highwater.sleepers SET asleep_until = now() WHERE instance_id = $1")
        .bind(instance)
        .execute(pool)
        .await?;
    Ok(())
}

/// Removes `instance`'s row (at shutdown).
pub async fn forget(pool: &PgPool, instance: &str) -> Result<()> {
    sqlx::query("DELETE FROM highwater.sleepers WHERE instance_id = $1").bind(instance).execute(pool).await?;
    Ok(())
}
