//! A SQL sink's statement, checked when its consumer is applied (`consumer apply`, the operator,
//! `dispatch --consumers`, the quickstart: every front end goes through `definitions::apply`).
//!
//! `statement: INSRT …` used to be accepted and fail only at delivery, each attempt a failure of
//! the first event. The check is the delivery's own first step: `highwater.sql_sink_prepare`
//! (sql_sink_prepare.sql) wraps the statement in the session's functions exactly as a dispatcher
//! does, with the nine typed parameters of the per-event form or the `highwater_batch` relation of
//! the set form, which checks its syntax, tables, columns and types. It runs in a transaction
//! that is rolled back: the temporary functions (and the transaction id creating them takes) never
//! outlive the check.
use highwater_crds::{SqlForm, SqlSink};
use sqlx::{
    Executor, PgConnection, PgPool, Postgres, SqlSafeStr, Type,
    postgres::{PgDatabaseError, PgErrorPosition, PgTypeInfo},
};

use crate::{Error, Result};

/// Refuses `sink`'s statement when a dispatcher could not run it, with PostgreSQL's error and
/// where in the statement it is.
pub async fn check(pool: &PgPool, consumer: &str, source: &str, sink: &SqlSink) -> Result<()> {
    let mut tx = pool.begin().await?;
    let problem: Option<String> = sqlx::query_scalar("SELECT highwater.sql_sink_prepare($1, $2)")
        .bind(sink.form.as_str())
        .bind(&sink.statement)
        .fetch_one(&mut *tx)
        .await?;
    let Some(problem) = problem else {
        tx.rollback().await?;
        return Ok(());
    };
    let at = position(&mut tx, sink).await.map(|p| format!(", at {p}")).unwrap_or_default();
    tx.rollback().await?;
    let params = match sink.form {
        SqlForm::PerEvent => {
            "$1 payload jsonb, $2 event id bigint, $3 stream type, $4 stream id, $5 event type, $6 tenant id \
             (text), $7 metadata jsonb, $8 stream version bigint, $9 created at timestamptz"
        }
        SqlForm::Set => {
            "the relation highwater_batch (payload, id, stream_type, stream_id, event_type, tenant_id, metadata, \
             stream_version, created_at)"
        }
    };
    Err(Error::refused(format!("consumer {consumer:?} ({source}): sink.sql.statement cannot run{at}: {problem}"))
        .with_fix(format!(
            "correct the statement (it runs with {params}), or create the tables it uses first; then apply again"
        )))
}

/// Where PostgreSQL places the error in the statement: `line L, column C`. The wrapper's error
/// carries no position, so the statement is parsed once more on its own (the set form's relation
/// made empty beside it); `None` when that finds no position (or no error).
async fn position(conn: &mut PgConnection, sink: &SqlSink) -> Option<String> {
    let types: Vec<PgTypeInfo> = match sink.form {
        SqlForm::PerEvent => vec![
            <serde_json::Value as Type<Postgres>>::type_info(),
            <i64 as Type<Postgres>>::type_info(),
            <String as Type<Postgres>>::type_info(),
            <String as Type<Postgres>>::type_info(),
            <String as Type<Postgres>>::type_info(),
            <String as Type<Postgres>>::type_info(),
            <serde_json::Value as Type<Postgres>>::type_info(),
            <i64 as Type<Postgres>>::type_info(),
            <chrono::DateTime<chrono::Utc> as Type<Postgres>>::type_info(),
        ],
        SqlForm::Set => {
            sqlx::raw_sql(
                "CREATE TEMPORARY VIEW highwater_batch AS
                 SELECT payload, id, stream_type, stream_id, event_type, tenant_id, metadata, stream_version,
                        created_at
                   FROM highwater.events WHERE false",
            )
            .execute(&mut *conn)
            .await
            .ok()?;
            Vec::new()
        }
    };
    let statement = sink.statement.trim_end_matches([' ', '\t', '\r', '\n', ';']);
    let e = conn.prepare_with(sqlx::AssertSqlSafe(statement).into_sql_str(), &types).await.err()?;
    let pg = e.as_database_error()?.try_downcast_ref::<PgDatabaseError>()?;
    let Some(PgErrorPosition::Original(at)) = pg.position() else { return None };
    // A character position, from 1.
    let before: String = statement.chars().take(at.saturating_sub(1)).collect();
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some(format!("line {line}, column {column}"))
}
