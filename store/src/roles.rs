//! Least privilege: the SQL that creates highwater's database roles and grants each what it needs
//! and nothing more (`highwater roles --print`; docs/security.md, "Database roles"). Every grant
//! here is exercised by `dispatcher/tests/least_privilege.rs`, which runs exactly this output on a
//! fresh cluster and checks that each forbidden action fails with `permission denied`.
//!
//! Two parts, because grants on the schema's objects can only be given once `highwater migrate`
//! has created them: [`Script::before_migrate`] (an administrator: roles, database rights) and
//! [`Script::after_migrate`] (the schema owner: schema, table and function grants, and default
//! privileges for what later migrations create). Both are idempotent.
use std::fmt::Write as _;

/// The roles to create, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roles {
    /// Owns schema `highwater` and runs `highwater migrate`; no superuser, `CREATE` on the
    /// database only.
    pub owner: String,
    /// `highwater dispatch`, and the CLI's `consumer` and `events` commands (ops, prune).
    pub dispatcher: String,
    /// `highwater-operator`: consumers, their shards, pod rows, ops by annotation.
    pub operator: String,
    /// Applications: append, position tokens, read-your-writes waits.
    pub application: String,
    /// The `sink.sql.role`s that SQL sink statements run under; the dispatcher is made a member.
    pub sql_sink_roles: Vec<String>,
    /// The database the roles connect to.
    pub database: String,
}

impl Default for Roles {
    fn default() -> Self {
        Roles {
            owner: "highwater_owner".into(),
            dispatcher: "highwater_dispatcher".into(),
            operator: "highwater_operator".into(),
            application: "highwater_app".into(),
            sql_sink_roles: Vec::new(),
            database: "postgres".into(),
        }
    }
}

/// The functions applications may call (what the clients in `clients/` call).
pub const APPLICATION_FUNCTIONS: &[&str] = &[
    "highwater.append(text, text, text, jsonb, jsonb, text, bigint)",
    "highwater.append(text, text, text, jsonb, jsonb, text, bigint, integer)",
    "highwater.append_position(text, text, text, jsonb, jsonb, text, bigint)",
    "highwater.token()",
    "highwater.applied(text, xid8, text)",
];

/// The tables the operator writes (consumers from EventConsumers, their pod shards, the ops its
/// annotations trigger: restart, skip, rebuild, disable, redrive, discard, replay; and the
/// registry from EventTypes: types, their versions and former names).
pub const OPERATOR_WRITES: &[&str] = &[
    "highwater.consumers",
    "highwater.consumer_shards",
    "highwater.dead_letters",
    "highwater.replays",
    "highwater.shard_changes",
    "highwater.event_types",
    "highwater.event_type_versions",
    "highwater.event_type_aliases",
];

/// The generated SQL, in its two parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// As an administrator (a superuser, or a role with `CREATEROLE` and the right to grant on
    /// the database), before the first `highwater migrate`.
    pub before_migrate: String,
    /// As the owner, after `highwater migrate` (again after an upgrade does no harm).
    pub after_migrate: String,
}

/// `name` as an SQL identifier.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A role that is created only if missing (`CREATE ROLE` has no `IF NOT EXISTS`).
fn create_role(out: &mut String, name: &str, attributes: &str) {
    let _ = writeln!(
        out,
        "DO $$ BEGIN\n  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {}) THEN\n    \
         CREATE ROLE {} {attributes};\n  END IF;\nEND $$;",
        literal(name),
        ident(name)
    );
}

impl Roles {
    pub fn script(&self) -> Script {
        let (owner, dispatcher, operator, app) =
            (ident(&self.owner), ident(&self.dispatcher), ident(&self.operator), ident(&self.application));
        let db = ident(&self.database);

        let mut b = String::new();
        let _ = writeln!(b, "-- Part 1, as an administrator (superuser or CREATEROLE), before `highwater migrate`.");
        let _ = writeln!(b, "-- Login roles get no password here: set one with ALTER ROLE ... PASSWORD (or \\password");
        let _ = writeln!(b, "-- in psql), or authenticate them another way. Idempotent: existing roles are kept.");
        let login = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS";
        let _ =
            writeln!(b, "\n-- The schema owner: runs `highwater migrate`, owns schema highwater and everything in it.");
        create_role(&mut b, &self.owner, login);
        let _ = writeln!(b, "GRANT CONNECT, CREATE ON DATABASE {db} TO {owner};");
        let _ = writeln!(
            b,
            "\n-- The dispatcher: delivery, membership, shards, `highwater consumer ...` and `events prune`."
        );
        create_role(&mut b, &self.dispatcher, login);
        let _ = writeln!(b, "\n-- The operator: consumers of EventConsumers, their pod shards, ops by annotation.");
        create_role(&mut b, &self.operator, login);
        let _ = writeln!(b, "\n-- Applications: append, position tokens, read-your-writes waits.");
        create_role(&mut b, &self.application, login);
        let _ = writeln!(b, "GRANT CONNECT ON DATABASE {db} TO {dispatcher}, {operator}, {app};");
        let _ = writeln!(
            b,
            "-- Other roles' sessions in pg_stat_activity (read-only statistics): the fence-age metric and\n\
             -- `highwater doctor` (run by the operator too) name the transaction holding delivery back.\n\
             GRANT pg_read_all_stats TO {dispatcher}, {operator};"
        );
        for sink in &self.sql_sink_roles {
            let s = ident(sink);
            let _ = writeln!(
                b,
                "\n-- SQL sink role {s}: statements with `sink.sql.role: {sink}` run under it (SET LOCAL ROLE),\n\
                 -- so the dispatcher must be a member. Grant it only the tables its statements touch, e.g.\n\
                 -- GRANT SELECT, INSERT, UPDATE ON my_projection TO {s};"
            );
            create_role(&mut b, sink, "NOLOGIN");
            let _ = writeln!(b, "GRANT {s} TO {dispatcher};");
        }

        let mut a = String::new();
        let _ = writeln!(
            a,
            "-- Part 2, as {owner} after `highwater migrate` (the objects exist only then); idempotent.\n\
             -- The default privileges cover what later migrations create."
        );
        let _ = writeln!(a, "GRANT USAGE ON SCHEMA highwater TO {dispatcher}, {operator}, {app};");
        let _ = writeln!(a, "\n-- The dispatcher reads and writes every table; it cannot drop, alter or truncate any.");
        for (what, on) in
            [("SELECT, INSERT, UPDATE, DELETE", "TABLES"), ("USAGE, SELECT", "SEQUENCES"), ("EXECUTE", "FUNCTIONS")]
        {
            let _ = writeln!(a, "GRANT {what} ON ALL {on} IN SCHEMA highwater TO {dispatcher};");
            let _ = writeln!(
                a,
                "ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA highwater GRANT {what} ON {on} TO {dispatcher};"
            );
        }
        let _ = writeln!(
            a,
            "\n-- The operator reads every table and writes consumers, shards, dead letters, the shard-change audit and the event-type registry."
        );
        let _ = writeln!(a, "GRANT SELECT ON ALL TABLES IN SCHEMA highwater TO {operator};");
        let _ = writeln!(
            a,
            "ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA highwater GRANT SELECT ON TABLES TO {operator};"
        );
        let _ = writeln!(a, "GRANT INSERT, UPDATE, DELETE ON {} TO {operator};", OPERATOR_WRITES.join(", "));
        let _ = writeln!(a, "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA highwater TO {operator};");
        let _ = writeln!(a, "GRANT EXECUTE ON FUNCTION highwater.repartition(text, boolean) TO {operator};");
        let _ = writeln!(a, "\n-- Applications: no table at all, only these functions (append runs as {owner}).");
        for f in APPLICATION_FUNCTIONS {
            let _ = writeln!(a, "GRANT EXECUTE ON FUNCTION {f} TO {app};");
        }
        Script { before_migrate: b, after_migrate: a }
    }

    /// Both parts, with a heading, as `highwater roles --print` prints them; `version` is the
    /// binary's (`highwater::VERSION`, passed in: the store does not know the git revision).
    pub fn render(&self, version: &str) -> String {
        let s = self.script();
        format!(
            "-- highwater {} database roles for database {} (docs/security.md, \"Database roles\").\n\
             -- Run part 1, then `highwater migrate` as {}, then part 2.\n\
             -- `highwater events drop-partitions` drops tables: run it as the owner, not the dispatcher.\n\n\
             {}\n{}",
            version,
            ident(&self.database),
            ident(&self.owner),
            s.before_migrate,
            s.after_migrate
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_every_part_is_there() {
        let r = Roles {
            database: "shop".into(),
            sql_sink_roles: vec!["projector".into(), "we\"ird".into()],
            ..Roles::default()
        };
        let out = r.render("0.0.0 (test)");
        assert!(out.contains("GRANT CONNECT, CREATE ON DATABASE \"shop\" TO \"highwater_owner\";"), "{out}");
        assert!(out.contains("GRANT \"we\"\"ird\" TO \"highwater_dispatcher\";"), "{out}");
        assert!(out.contains("WHERE rolname = 'we\"ird'"), "{out}");
        for f in APPLICATION_FUNCTIONS {
            assert!(out.contains(&format!("GRANT EXECUTE ON FUNCTION {f} TO \"highwater_app\";")), "{out}");
        }
        assert!(!out.contains("SUPERUSER;"));
    }
}
