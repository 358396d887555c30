//! The operator's one door to the event type registry (`highwater::event_types`): an
//! `EventType` spec applied as one transaction, and the stored events per version.
use highwater::event_types;
use highwater_crds::{EventTypeSpec, VersionStatus};
use sqlx::PgPool;

use crate::Result;

/// The registry's answer to a spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every version of the spec is registered.
    Applied,
    /// Nothing changed; the message says why and how to fix it.
    Refused(String),
}

/// Applies `spec` to the registry: declarative, idempotent, one transaction.
///
/// Until the versioned registry lands (`event_types::apply_type`), the type is registered with
/// the schema of its latest version.
pub async fn apply(pool: &PgPool, spec: &EventTypeSpec) -> Result<Outcome> {
    let latest = spec.versions.iter().max_by_key(|v| v.version);
    let schema = latest.and_then(|v| v.schema.as_ref());
    match event_types::register(pool, &spec.event_type, schema, spec.description.as_deref()).await {
        Ok(()) => Ok(Outcome::Applied),
        Err(highwater::Error::Refused(m)) => Ok(Outcome::Refused(m.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// Stored events per registered version, in version order (empty when the type is unknown).
pub async fn counts(pool: &PgPool, event_type: &str) -> Result<Vec<VersionStatus>> {
    let known: Option<i64> = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM highwater.events e WHERE e.event_type = t.event_type)
           FROM highwater.event_types t WHERE t.event_type = $1",
    )
    .bind(event_type)
    .fetch_optional(pool)
    .await
    .map_err(highwater::Error::from)?;
    Ok(known.map(|events| vec![VersionStatus { version: 1, events }]).unwrap_or_default())
}
