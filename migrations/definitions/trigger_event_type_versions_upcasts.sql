-- The generated code of the upcasts follows the registry (upcasts_changed.sql), once per
-- statement, in the writing transaction: a registration's dry run already calls the new step,
-- and a rolled-back registration leaves no function behind. 0.4.0 (issue 46).
CREATE OR REPLACE TRIGGER event_type_versions_upcasts
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON highwater.event_type_versions
    FOR EACH STATEMENT EXECUTE FUNCTION highwater.upcasts_changed();
