-- The name of the session's functions for a SQL sink's statement (sql_sink_prepare.sql). The
-- prefix changes whenever the code that sql_sink_prepare generates changes, so that a session
-- that made the old functions makes the new ones on its next prepare instead of reusing the old
-- ones (they go with the session): `hw_sink_` (20261201000001_sql_sink_batch.sql), `hw_sink2_`
-- (20261202000030_sql_sink_simple_calls.sql), `hw_sink3_` (20261202000040_sql_sink_range_read.sql), `hw_sink4_`
-- (20261204000100_type_index.sql), `hw_sink5_` (20261205000000_event_type_versions.sql: upcasts),
-- `hw_sink6_` (0.4.0, issue 44: sparse batches looked up by (tx_id, id) pairs), `hw_sink7_` (0.4.0,
-- issue 48: the writer's traceparent set per event).
CREATE OR REPLACE FUNCTION highwater.sql_sink_name(p_form text, p_statement text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'hw_sink7_' || md5(p_form || ':' || p_statement) $$;
