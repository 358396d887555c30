-- Regenerates the upcasts' code (upcast_generate.sql) after a statement changed
-- highwater.event_type_versions (trigger event_type_versions_upcasts): a version registered with
-- an upcast by any role that may write the registry (the operator's, the CLI's, a previous
-- release's binary during a rolling upgrade), or the versions of a deleted type. SECURITY
-- DEFINER: upcast_generate is the owner's alone (its EXECUTE is revoked from PUBLIC).
CREATE OR REPLACE FUNCTION highwater.upcasts_changed() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM highwater.upcast_generate();
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION highwater.upcasts_changed() FROM PUBLIC;
