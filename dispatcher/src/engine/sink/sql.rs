use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use highwater_crds::SqlSink as SqlSinkSpec;
use sqlx::{AssertSqlSafe, types::Json};

use super::{DeliveryContext, Sink, SinkError};
use crate::{Error, Event, Result};

/// Runs the consumer's statement once per event inside the cursor transaction.
pub struct SqlSink {
    statement: Arc<str>,
    role: Option<String>,
    timeout_ms: Option<u64>,
}

impl SqlSink {
    pub fn new(spec: &SqlSinkSpec) -> Result<Self> {
        let timeout_ms = match &spec.timeout {
            Some(t) => Some(
                humantime::parse_duration(t)
                    .map_err(|e| Error::config(format!("sink.sql.timeout {t:?}: {e}")))?
                    .as_millis() as u64,
            ),
            None => Some(Duration::from_secs(30).as_millis() as u64),
        };
        Ok(SqlSink { statement: spec.statement.as_str().into(), role: spec.role.clone(), timeout_ms })
    }
}

fn fail(index: usize, e: sqlx::Error) -> SinkError {
    let message = match e.as_database_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().unwrap_or_default()),
        None => e.to_string(),
    };
    SinkError { index, message }
}

#[async_trait]
impl Sink for SqlSink {
    fn kind(&self) -> &'static str {
        "sql"
    }

    fn transactional(&self) -> bool {
        true
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let (consumer, instance_id) = (ctx.consumer, ctx.instance_id);
        let conn = ctx.tx.as_deref_mut().expect("transactional sink gets the cursor transaction");
        // set_config(..., true) is SET LOCAL with bind parameters: no identifier quoting needed.
        sqlx::query(
            "SELECT set_config('statement_timeout', $1, true), set_config('role', coalesce($2, 'none'), true),
                    set_config('highwater.consumer', $3, true), set_config('highwater.instance_id', $4, true)",
        )
        .bind(self.timeout_ms.map(|m| m.to_string()).unwrap_or_else(|| "0".into()))
        .bind(&self.role)
        .bind(consumer)
        .bind(instance_id)
        .execute(&mut *conn)
        .await
        .map_err(|e| fail(0, e))?;
        for (i, ev) in events.iter().enumerate() {
            // Row-level security reads highwater.tenant_id; events appended by the statement take
            // this event as their causation and keep its correlation.
            sqlx::query(
                "SELECT set_config('highwater.tenant_id', coalesce($1, ''), true),
                        set_config('highwater.correlation_id', coalesce($2, ''), true),
                        set_config('highwater.causation_id', $3, true)",
            )
            .bind(&ev.tenant_id)
            .bind(ev.correlation_id())
            .bind(ev.id.to_string())
            .execute(&mut *conn)
            .await
            .map_err(|e| fail(i, e))?;
            // All nine parameters are always bound: PostgreSQL accepts parameters the statement
            // does not reference when their types are given, so a statement uses any subset.
            sqlx::query(AssertSqlSafe(self.statement.clone()))
                .bind(Json(&ev.payload))
                .bind(ev.id)
                .bind(&ev.stream_type)
                .bind(&ev.stream_id)
                .bind(&ev.event_type)
                .bind(&ev.tenant_id)
                .bind(Json(&ev.metadata))
                .bind(ev.stream_version)
                .bind(ev.created_at)
                .execute(&mut *conn)
                .await
                .map_err(|e| fail(i, e))?;
        }
        sqlx::query("SELECT set_config('role', 'none', true), set_config('highwater.tenant_id', '', true)")
            .execute(&mut *conn)
            .await
            .map_err(|e| fail(events.len().saturating_sub(1), e))?;
        Ok(())
    }
}
