//! The SQL sink: the consumer's statement, applied in the transaction that moves the cursor. Its
//! statements are the store's (`highwater_store::sql_sink`: the one-round-trip batch and cursor
//! move, the search for the event that fails at COMMIT); this is the sink the pass sees.
use async_trait::async_trait;
use highwater_crds::SqlSink as SqlSinkSpec;
use highwater_store::pg::{PgConnection, Postgres, Transaction};

use super::{Applied, SinkError, TransactionalSink};
use highwater_store::{
    Event, Result,
    shards::Advance,
    sql_sink::{self, Failed, Statement},
};

pub struct SqlSink {
    statement: Statement,
}

impl SqlSink {
    /// `event_versions`: the consumer's `eventVersions` as `highwater.upcast_for` takes it
    /// (`None`: payloads as stored).
    pub fn new(spec: &SqlSinkSpec, event_versions: Option<serde_json::Value>) -> Result<Self> {
        let mut statement = Statement::new(spec)?;
        statement.event_versions = event_versions;
        Ok(SqlSink { statement })
    }
}

fn sink_error(f: Failed) -> SinkError {
    SinkError { index: f.index, message: f.message, deferred: f.deferred, backpressure: None }
}

#[async_trait]
impl TransactionalSink for SqlSink {
    fn kind(&self) -> &'static str {
        "sql"
    }

    fn needs_bodies(&self) -> bool {
        false
    }

    async fn prepare(&self, conn: &mut PgConnection) -> Result<(), SinkError> {
        sql_sink::prepare(conn, &self.statement).await.map_err(sink_error)
    }

    fn statement(&self) -> Option<&Statement> {
        Some(&self.statement)
    }

    async fn begin<'c>(&self, conn: &'c mut PgConnection, who: (&str, &str)) -> Result<Transaction<'c, Postgres>> {
        sql_sink::begin(conn, &self.statement, who).await
    }

    async fn deliver(&self, tx: &mut PgConnection, events: &[Event]) -> Result<(), SinkError> {
        sql_sink::apply(tx, &self.statement, events).await.map_err(sink_error)
    }

    async fn deliver_and_advance(
        &self,
        conn: &mut PgConnection,
        who: (&str, &str),
        events: &[Event],
        advance: &Advance<'_>,
    ) -> Result<Applied> {
        Ok(match sql_sink::apply_and_advance(conn, &self.statement, who, events, advance).await? {
            sql_sink::Applied::Moved(shard) => Applied::Moved(shard),
            sql_sink::Applied::Refused => Applied::Refused,
            sql_sink::Applied::Failed(f) => Applied::Failed(sink_error(f)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sink is built through the store's statement, which checks the timeout
    /// (`highwater_store::sql_sink`'s tests hold the limit itself).
    #[test]
    fn a_timeout_beyond_postgresql_s_limit_is_refused() {
        let spec =
            |t: &str| SqlSinkSpec { statement: "SELECT 1".into(), timeout: Some(t.into()), ..Default::default() };
        assert!(SqlSink::new(&spec("24d"), None).is_ok());
        let err = SqlSink::new(&spec("30d"), None).err().expect("30d is over the limit").to_string();
        assert!(err.contains("sink.sql.timeout") && err.contains("24days 20h 31m 23s 647ms"), "{err}");
    }
}
