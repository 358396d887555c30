//! What a `migrate` brings the schema to: the ordered steps, the definitions and the window.
use sha2::{Digest, Sha384};

use super::{definitions::DEFINITIONS, window};

/// One ordered migration.
#[derive(Debug, Clone)]
pub struct Step {
    pub version: i64,
    pub description: String,
    pub sql: String,
    /// sqlx's checksum (SHA-384 of the text), as `_sqlx_migrations` records it.
    pub checksum: Vec<u8>,
    /// A breaking step (a contract: it removes what older binaries use) names the oldest binary
    /// that survives it, in its first lines: `-- breaking: oldest_binary = N`.
    pub breaking: Option<i32>,
}

impl Step {
    pub fn new(version: i64, description: &str, sql: &str) -> Step {
        Step {
            version,
            description: description.to_owned(),
            sql: sql.to_owned(),
            checksum: Sha384::digest(sql.as_bytes()).to_vec(),
            breaking: breaking_marker(sql),
        }
    }
}

/// The `-- breaking: oldest_binary = N` marker among a migration's leading comment lines.
fn breaking_marker(sql: &str) -> Option<i32> {
    sql.lines().take_while(|l| l.trim_start().starts_with("--") || l.trim().is_empty()).find_map(|l| {
        let rest = l.trim_start().trim_start_matches('-').trim().strip_prefix("breaking:")?;
        rest.trim().strip_prefix("oldest_binary")?.trim().strip_prefix('=')?.trim().parse().ok()
    })
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// (name, text), applied in this order after the steps.
    pub definitions: Vec<(String, String)>,
    pub schema_version: i32,
    /// The window's floor before breaking steps raise it.
    pub oldest_binary: i32,
    pub release: String,
}

impl Plan {
    /// `migrations/` and `migrations/definitions/` as this binary embeds them.
    pub fn this_release() -> Plan {
        let m = sqlx::migrate!("../migrations");
        Plan {
            steps: m.iter().map(|s| Step::new(s.version, &s.description, s.sql.as_str())).collect(),
            definitions: DEFINITIONS.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect(),
            schema_version: window::SCHEMA_VERSION,
            oldest_binary: window::OLDEST_BINARY,
            release: window::RELEASE.to_owned(),
        }
    }

    /// The oldest binary the migrated schema accepts: the floor, raised by every breaking step.
    pub fn oldest_binary(&self) -> i32 {
        self.steps.iter().filter_map(|s| s.breaking).fold(self.oldest_binary, i32::max)
    }

    /// One checksum over every definition, recorded with the schema version, so an unchanged set
    /// is not applied again (replacing a trigger on `events` takes a lock writers wait for).
    pub fn definitions_checksum(&self) -> Vec<u8> {
        let mut h = Sha384::new();
        for (name, text) in &self.definitions {
            h.update(name.as_bytes());
            h.update([0]);
            h.update(text.as_bytes());
            h.update([0]);
        }
        h.finalize().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaking_marker_is_read_from_the_leading_comments_only() {
        assert_eq!(
            breaking_marker("-- Drops append's old signature.\n-- breaking: oldest_binary = 4\nDROP x;"),
            Some(4)
        );
        assert_eq!(breaking_marker("-- nothing\nCREATE TABLE t ();\n-- breaking: oldest_binary = 4"), None);
        assert_eq!(breaking_marker("-- breaking: oldest_binary = four\n"), None);
    }

    #[test]
    fn a_breaking_step_raises_the_oldest_binary() {
        let mut p = Plan::this_release();
        let floor = p.oldest_binary();
        p.steps.push(Step::new(99_991_231_000_000, "contract", "-- breaking: oldest_binary = 9\nSELECT 1;"));
        assert_eq!(p.oldest_binary(), 9.max(floor));
    }
}
