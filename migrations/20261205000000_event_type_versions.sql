-- Event types with versions (issue 36, part 2; docs/events.md "Versions"). Expand only: new
-- tables, nullable columns, no rewrite. Binaries of 0.4.0 keep working: `append` keeps its
-- signature (and records the latest version), `event_types.json_schema` stays the schema of the
-- latest version, which is what they validate against.
--
-- `migrate`'s lock prelude holds every table of the schema in append's order (event_types, then
-- events) before this runs, so no application transaction meets a lock-order inversion here.

-- The latest registered version of each type (NULL: version 1, or a type registered by a binary
-- that knows no versions) and its compatibility mode, checked when a version is registered.
-- `json_schema` remains the latest version's schema: the fast path of `append` reads only this row.
ALTER TABLE highwater.event_types
    ADD COLUMN latest_version integer CHECK (latest_version > 1),
    ADD COLUMN compatibility  text NOT NULL DEFAULT 'backward'
        CHECK (compatibility IN ('backward', 'backward_transitive', 'forward', 'forward_transitive',
                                 'full', 'full_transitive', 'none'));

-- Every version of every type: its schema and the upcast from the version before it (a SQL
-- expression over `payload`, applied on read for consumers that ask for the latest version).
-- A type without rows here (registered by an older binary) has one version, 1, whose schema is
-- `event_types.json_schema`.
CREATE TABLE highwater.event_type_versions (
    event_type  text NOT NULL REFERENCES highwater.event_types (event_type),
    version     integer NOT NULL CHECK (version > 0),
    json_schema jsonb,
    upcast      text CHECK (upcast IS NULL OR version > 1),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, version)
);
INSERT INTO highwater.event_type_versions (event_type, version, json_schema)
SELECT event_type, 1, json_schema FROM highwater.event_types;

-- Former names of a type: its events stored under the old name stay readable by consumers of the
-- new one (the bug of Marten #2615 avoided). The old name stays a registered type, as its stored
-- events name it.
CREATE TABLE highwater.event_type_aliases (
    alias      text PRIMARY KEY REFERENCES highwater.event_types (event_type),
    event_type text NOT NULL REFERENCES highwater.event_types (event_type) CHECK (event_type <> alias),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX event_type_aliases_event_type ON highwater.event_type_aliases (event_type);

-- The version of its type's schema an event was appended with (NULL: version 1, as every event
-- appended before this release). Nullable without a default: metadata only on every partition.
ALTER TABLE highwater.events ADD COLUMN schema_version integer;
