//! One consumer's definition as stored, for the console's consumer page (which masks its
//! secrets before rendering it).
use highwater_crds::ConsumerSpec;
use sqlx::{PgPool, types::Json};

use crate::Result;

/// A consumer's stored definition: its spec and where it came from (`file:…`, `kubernetes:…`).
#[derive(Debug, Clone)]
pub struct Stored {
    pub spec: ConsumerSpec,
    pub source: String,
}

/// The definition of `name`, or `None` when no consumer has that name.
pub async fn definition(pool: &PgPool, name: &str) -> Result<Option<Stored>> {
    let row: Option<(Json<ConsumerSpec>, String)> =
        sqlx::query_as("SELECT spec, source FROM highwater.consumers WHERE name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(Json(spec), source)| Stored { spec, source }))
}
