-- The compatibility window (docs/operations.md, "Upgrading"). `highwater migrate` writes the one
-- row at the end of its transaction: the schema version this release brings, the oldest binary
-- (by its schema version) that may still run against it, the release that migrated, and a
-- checksum of migrations/definitions/ so that an unchanged set of functions is not re-applied.
-- Every binary from 0.3.0 on reads it at start and refuses a schema outside its window; a running
-- dispatcher that sees the schema move past it finishes its passes and exits 0.
CREATE TABLE highwater.schema_version (
    singleton            boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version              integer NOT NULL CHECK (version > 0),
    oldest_binary        integer NOT NULL CHECK (oldest_binary BETWEEN 1 AND version),
    release              text NOT NULL,
    definitions_checksum bytea NOT NULL,
    migrated_at          timestamptz NOT NULL DEFAULT now()
);
-- Every role a binary runs as reads it before anything else.
GRANT SELECT ON highwater.schema_version TO PUBLIC;

-- Which binary each live dispatcher is (its schema version), so that `migrate` can refuse a
-- breaking step while older ones run. Nullable: releases before 0.3.0 do not write it.
ALTER TABLE highwater.dispatchers ADD COLUMN binary_schema integer;
