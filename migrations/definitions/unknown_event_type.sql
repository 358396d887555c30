-- Raises the error of an append whose event type is not registered (SQLSTATE HW001), for the
-- append functions (append.sql, append_schema_version.sql): one text for all of them.
--
-- A name the registry can never hold (its CHECK: a letter, then letters, digits, _ . : -, at most
-- 200) is called invalid, with what a valid name looks like, instead of suggesting a register
-- command that would be refused too (issue 44: `--type "Order Placed"` was told to run
-- `highwater event-types register Order Placed`, unquoted and invalid). A valid name holds no
-- character a shell treats specially, so the suggested command works as pasted.
-- Only the error path calls it; it reads nothing.
CREATE OR REPLACE FUNCTION highwater.unknown_event_type(p_event_type text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_event_type IS NULL OR p_event_type !~ '^[A-Za-z][A-Za-z0-9_.:-]{0,199}$' THEN
        RAISE EXCEPTION 'invalid event type name %: a name starts with a letter, followed by letters, digits, '
                        '_ . : or - (at most 200 characters)', CASE WHEN p_event_type IS NULL THEN 'NULL' ELSE '"' || p_event_type || '"' END
            USING ERRCODE = 'HW001',
                  HINT = 'use a name such as OrderPlaced or order.placed: the same name in '
                         '`highwater event-types register NAME` and in every append';
    END IF;
    RAISE EXCEPTION 'unknown event type "%"', p_event_type
        USING ERRCODE = 'HW001',
              HINT = format('register it first: `highwater event-types register %s` (optionally with --schema FILE)',
                            p_event_type);
END
$$;

REVOKE ALL ON FUNCTION highwater.unknown_event_type(text) FROM PUBLIC;
