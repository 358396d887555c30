//! The operator's one door to the event type registry (`highwater::event_types`): an
//! `EventType` spec applied with [`event_types::apply_type`] (declarative, idempotent, one
//! transaction, the same call as the CLI's), and the stored events per version.
use highwater::event_types::{self, TypeSpec};
use highwater_crds::{EventTypeSpec, VersionStatus};
use sqlx::PgPool;

use crate::Result;

/// The registry's answer to a spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every version of the spec is registered; `registered` are the ones this call added.
    Applied { registered: Vec<i32>, latest: i32, notes: Vec<String> },
    /// Nothing changed; the message says why and how to fix it.
    Refused(String),
}

/// Applies `spec` to the registry: every version registered, or nothing changed and why.
pub async fn apply(pool: &PgPool, spec: &EventTypeSpec) -> Result<Outcome> {
    match event_types::apply_type(pool, &TypeSpec::from(spec)).await {
        Ok(a) => Ok(Outcome::Applied { registered: a.registered, latest: a.latest, notes: a.notes }),
        Err(highwater::Error::Refused(m)) => Ok(Outcome::Refused(in_resource_terms(&m.to_string()))),
        Err(e) => Err(e.into()),
    }
}

/// The store's fixes name the CLI's flags; an `EventType`'s reader needs the fields.
fn in_resource_terms(message: &str) -> String {
    let flags = [("--upcast", "spec.versions[].upcast"), ("--compatibility", "spec.compatibility")];
    let named: Vec<String> =
        flags.iter().filter(|(f, _)| message.contains(f)).map(|(f, field)| format!("{f} is {field}")).collect();
    if named.is_empty() { message.to_owned() } else { format!("{message}\n  (in the EventType: {})", named.join(", ")) }
}

/// Stored events per registered version, in version order (empty when the type is unknown).
pub async fn counts(pool: &PgPool, event_type: &str) -> Result<Vec<VersionStatus>> {
    Ok(event_types::version_counts(pool, event_type)
        .await?
        .into_iter()
        .map(|c| VersionStatus { version: c.version, events: c.events })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_s_flags_are_named_as_fields() {
        let m =
            in_resource_terms("not compatible\n  fix: declare an upcast (`--upcast EXPR`) or `--compatibility none`");
        assert!(
            m.ends_with(
                "(in the EventType: --upcast is spec.versions[].upcast, --compatibility is spec.compatibility)"
            ),
            "{m}"
        );
        assert_eq!(in_resource_terms("version 2 differs"), "version 2 differs");
    }
}
