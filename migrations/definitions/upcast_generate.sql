-- The code that applies the registered upcasts (issue 46: an upcast at the cost of a function
-- call), generated from highwater.event_type_versions. Until 0.4.0 highwater.upcast ran each
-- step's expression with a dynamic EXECUTE, parsed and planned again for every event and step
-- (11-12 µs of CPU per event and step on the 2-core dev machine); a generated step is a function
-- call, planned once per calling transaction: 2.5-2.9 µs (docs/benchmarks.md, "Upcasts").
-- Generated here:
-- - per version step with an upcast, `highwater."hw_upcast_<type>_v<N>"(jsonb)`: a SQL function
--   whose body is the registered expression in exactly the form the EXECUTE ran
--   (`SELECT (<upcast>)::jsonb FROM (SELECT $1 AS payload) AS e`), STABLE, SECURITY INVOKER
--   (the caller's rights, as before) and `search_path = pg_catalog, pg_temp` (the path the
--   expression was evaluated under inside highwater.upcast). A type name too long for an
--   identifier with its prefix and suffix (63 bytes) is replaced by its md5 there; the name
--   is quoted (%I), and the expression is only ever the quoted body text (%L) of the one
--   CREATE statement executed: nothing registered is executed here.
-- - `highwater.hw_upcasts(type, from, payload, to)`: one CASE branch per type with upcasts
--   calling its steps above `from` (up to `to`), in version order; any other type's payload is
--   returned as is. highwater.upcast calls it after resolving a former name, so a read from
--   version 1 to the latest is one call. The branches are tested in order of the type's name:
--   a handful of types with upcasts cost nothing, hundreds would cost a comparison each.
--
-- Runs at every change of highwater.event_type_versions (trigger
-- event_type_versions_upcasts, in the registering transaction, before the dry run calls the
-- new step) and at every `highwater migrate` (below: steps registered by older releases, and
-- generated code of an older form, are regenerated). Idempotent: a function whose generated
-- source, settings and volatility are already right is left alone (replacing it would make
-- every session re-plan its callers), and those of steps no longer registered (a type deleted)
-- are dropped. SECURITY DEFINER: registering is writing the registry (the operator's role
-- may; docs/security.md), creating functions in schema highwater is the owner's. The bodies are
-- created with check_function_bodies off: they are parsed when first called, with the caller's
-- rights, as the EXECUTE did, and not with the owner's here (the registration's dry run has
-- already parsed and run the new step as the registering role). Concurrent registrations of
-- different types queue on an advisory lock (both would replace hw_upcasts: "tuple concurrently
-- updated"); each regenerates from what is committed plus its own rows. That holds in READ
-- COMMITTED, where registrations run (event_types::apply_type): a registration in a REPEATABLE
-- READ transaction reads the registry as of its snapshot and could leave out a type another
-- transaction registered meanwhile; `SELECT highwater.upcast_generate()` as the owner (or the
-- next registration) puts it back.
--
-- Changing the generated form: change v_form/v_config below; every function generated in the
-- old form differs from the new and is replaced at the next migrate.
CREATE OR REPLACE FUNCTION highwater.upcast_generate() RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET check_function_bodies = off
AS $fn$
DECLARE
    v_form constant text := 'SELECT (%s)::jsonb FROM (SELECT $1 AS payload) AS e';
    v_config constant text[] := ARRAY['search_path=pg_catalog, pg_temp'];
    v_names text[] := '{}';
    v_cases text := '';
    v_type text;
    v_body text;
    v_step record;
    v_old record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('highwater'), hashtext('upcast_generate'));
    FOR v_step IN
        SELECT s.event_type, s.version, s.upcast,
               CASE WHEN octet_length(s.event_type) <= 63 - octet_length(format('hw_upcast__v%s', s.version))
                    THEN format('hw_upcast_%s_v%s', s.event_type, s.version)
                    ELSE format('hw_upcast_%s_v%s', md5(s.event_type), s.version) END AS name
          FROM highwater.event_type_versions s
         WHERE s.upcast IS NOT NULL
         ORDER BY s.event_type COLLATE "C", s.version
    LOOP
        v_body := format(v_form, v_step.upcast);
        SELECT p.prosrc, p.proconfig, p.provolatile, p.prosecdef INTO v_old FROM pg_proc p
         WHERE p.oid = to_regprocedure(format('highwater.%I(jsonb)', v_step.name));
        IF NOT FOUND OR v_old.prosrc IS DISTINCT FROM v_body OR v_old.proconfig IS DISTINCT FROM v_config
           OR v_old.provolatile <> 's' OR v_old.prosecdef THEN
            EXECUTE format('CREATE OR REPLACE FUNCTION highwater.%I(jsonb) RETURNS jsonb LANGUAGE sql STABLE '
                           'SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS %L', v_step.name, v_body);
            EXECUTE format('COMMENT ON FUNCTION highwater.%I(jsonb) IS %L', v_step.name,
                           format('The upcast of %s from version %s to %s, generated by highwater.upcast_generate '
                                  'from highwater.event_type_versions (do not edit).',
                                  v_step.event_type, v_step.version - 1, v_step.version));
        END IF;
        v_names := v_names || v_step.name::text;
        IF v_type IS DISTINCT FROM v_step.event_type THEN
            v_cases := v_cases || format(E'\n    WHEN %L THEN', v_step.event_type);
            v_type := v_step.event_type;
        END IF;
        v_cases := v_cases || format(E'\n        IF p_from < %1$s AND (p_to IS NULL OR p_to >= %1$s) THEN v := highwater.%2$I(v); END IF;',
                                     v_step.version, v_step.name);
    END LOOP;
    v_body := E'\n-- Generated by highwater.upcast_generate from highwater.event_type_versions (do not edit).\n'
              || E'DECLARE\n    v jsonb := p_payload;\nBEGIN'
              || CASE WHEN v_cases = '' THEN ''
                      ELSE E'\n    CASE p_event_type' || v_cases || E'\n    ELSE NULL;\n    END CASE;' END
              || E'\n    RETURN v;\nEND\n';
    SELECT p.prosrc, p.proconfig, p.provolatile, p.prosecdef INTO v_old FROM pg_proc p
     WHERE p.oid = to_regprocedure('highwater.hw_upcasts(text, integer, jsonb, integer)');
    IF NOT FOUND OR v_old.prosrc IS DISTINCT FROM v_body OR v_old.proconfig IS DISTINCT FROM v_config
       OR v_old.provolatile <> 's' OR v_old.prosecdef THEN
        EXECUTE format('CREATE OR REPLACE FUNCTION highwater.hw_upcasts(p_event_type text, p_from integer, '
                       'p_payload jsonb, p_to integer) RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY INVOKER '
                       'SET search_path = pg_catalog, pg_temp AS %L', v_body);
        COMMENT ON FUNCTION highwater.hw_upcasts(text, integer, jsonb, integer) IS
            'The payload of an event of a type (not a former name) stored at version p_from, through the upcasts of its steps above it up to p_to (NULL: all); generated by highwater.upcast_generate (do not edit).';
    END IF;
    -- After hw_upcasts stopped calling them: the steps no longer registered.
    FOR v_old IN
        SELECT p.oid::regprocedure AS f FROM pg_proc p
         WHERE p.pronamespace = 'highwater'::regnamespace AND p.proname LIKE 'hw\_upcast\_%'
           AND NOT p.proname = ANY (v_names)
    LOOP
        EXECUTE format('DROP FUNCTION %s', v_old.f);
    END LOOP;
END
$fn$;

REVOKE ALL ON FUNCTION highwater.upcast_generate() FROM PUBLIC;

COMMENT ON FUNCTION highwater.upcast_generate() IS
    'Generates the functions that apply the registered upcasts (highwater.hw_upcasts and one per version step) from highwater.event_type_versions; idempotent.';

-- At every `highwater migrate`, after the ordered migrations: the generated code for what is
-- registered (a fresh install: hw_upcasts alone, returning every payload as is).
SELECT highwater.upcast_generate();
