//! The operator's one door to the event type registry (`highwater::event_types`): an
//! `EventType` spec applied with [`event_types::apply_type`] (declarative, idempotent, one
//! transaction, the same call as the CLI's), and the stored events per version.
use highwater::event_types::{self, Compatibility, TypeSpec, VersionSpec};
use highwater_crds::{Compatibility as Mode, EventTypeSpec, VersionStatus};
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

/// The store's form of a spec.
pub fn type_spec(spec: &EventTypeSpec) -> TypeSpec {
    TypeSpec {
        event_type: spec.event_type.clone(),
        description: spec.description.clone(),
        compatibility: match spec.compatibility {
            Mode::Backward => Compatibility::Backward,
            Mode::BackwardTransitive => Compatibility::BackwardTransitive,
            Mode::Forward => Compatibility::Forward,
            Mode::ForwardTransitive => Compatibility::ForwardTransitive,
            Mode::Full => Compatibility::Full,
            Mode::FullTransitive => Compatibility::FullTransitive,
            Mode::None => Compatibility::None,
        },
        versions: spec
            .versions
            .iter()
            .map(|v| VersionSpec { version: v.version, schema: v.schema.clone(), upcast: v.upcast.clone() })
            .collect(),
        aliases: spec.aliases.clone(),
    }
}

/// Applies `spec` to the registry: every version registered, or nothing changed and why.
pub async fn apply(pool: &PgPool, spec: &EventTypeSpec) -> Result<Outcome> {
    match event_types::apply_type(pool, &type_spec(spec)).await {
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

    #[test]
    fn every_mode_maps_to_the_store_s() {
        for (mode, stored) in [
            (Mode::Backward, "backward"),
            (Mode::BackwardTransitive, "backward_transitive"),
            (Mode::Forward, "forward"),
            (Mode::ForwardTransitive, "forward_transitive"),
            (Mode::Full, "full"),
            (Mode::FullTransitive, "full_transitive"),
            (Mode::None, "none"),
        ] {
            let spec = EventTypeSpec {
                event_type: "A".into(),
                description: None,
                compatibility: mode,
                versions: vec![highwater_crds::VersionSpec { version: 1, schema: None, upcast: None }],
                aliases: vec![],
            };
            assert_eq!(type_spec(&spec).compatibility.as_str(), stored);
            // The store parses the CRD's names as well.
            assert_eq!(mode.as_str().parse::<Compatibility>().unwrap().as_str(), stored);
        }
    }
}
