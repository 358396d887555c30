-- The JSON Schema check with a fixed search path: NULL when `doc` is valid. highwater.append has
-- no SET clause (append.sql, point 1), and highwater.json_schema_error resolves its operators
-- through the search path, so append calls it through this, which keeps the SET clause: only
-- event types with a schema pay for setting the search path. Since 20261201000030_append_cost.sql.
CREATE OR REPLACE FUNCTION highwater.json_schema_check(schema jsonb, doc jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT highwater.json_schema_error(schema, doc, '$') $$;
