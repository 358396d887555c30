//! Who the lock prelude waits for. A lock request that times out tells nothing about its
//! holders, and they are gone by the time anyone looks; so while the prelude waits, a second
//! connection samples `pg_blocking_pids` of the migrating backend just before the cap, and a
//! retry names the transactions the migration gave way to (pid, application, state, how long in
//! a transaction, the statement) — what a user needs to find a long transaction.
use std::time::Duration;

use sqlx::{ConnectOptions, PgPool};
use tokio::task::JoinHandle;

/// A sample of the transactions `pid`'s lock request waits for, taken once after `after`.
pub struct Watch(JoinHandle<Option<String>>);

impl Watch {
    pub fn start(pool: &PgPool, pid: i32, after: Duration) -> Watch {
        let options = pool.connect_options();
        Watch(tokio::spawn(async move {
            tokio::time::sleep(after).await;
            // Its own connection: the pool may be as small as the migration's one.
            let mut conn = options.connect().await.ok()?;
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT string_agg(format('%s held by pid %s (%s, %s, in a transaction for %s s): %s',
                                          w.relation, a.pid, coalesce(nullif(a.application_name, ''), 'no application_name'),
                                          a.state, round(extract(epoch FROM now() - a.xact_start)::numeric, 1),
                                          left(regexp_replace(a.query, '\\s+', ' ', 'g'), 160)), '; ')
                   FROM pg_stat_activity a,
                        LATERAL (SELECT coalesce(string_agg(DISTINCT l.relation::regclass::text, ', '), 'a lock') AS relation
                                   FROM pg_locks l WHERE l.pid = $1 AND NOT l.granted) w
                  WHERE a.pid = ANY (pg_blocking_pids($1))",
            )
            .bind(pid)
            .fetch_one(&mut conn)
            .await
            .ok()
            .flatten()
        }))
    }

    /// The sample, if it was taken (the lock was still waited for when it ran).
    pub async fn finish(self) -> Option<String> {
        if !self.0.is_finished() {
            // The cap is a statement timeout just after the sample's moment: give it a moment.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if self.0.is_finished() { self.0.await.ok().flatten() } else { self.stop() }
    }

    pub fn stop(self) -> Option<String> {
        self.0.abort();
        None
    }
}
