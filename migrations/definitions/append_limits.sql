-- The size limits of an append (issue 44; docs/events.md "Limits"), raised as SQLSTATE HW030 with
-- the field, its size, the limit and the fix. Both forms of highwater.append call this only when
-- their inline test of the same limits fails (append.sql), so an append within the limits pays
-- four length reads and no call. Returns quietly when every value is within its limit (a payload
-- that reached append compressed is measured here, uncompressed, and may well be).
--
-- Why these limits:
-- - stream type 200 bytes and stream id 1024 bytes: the pair is the primary key of
--   highwater.stream_versions, and a btree entry holds at most 2704 bytes (a third of a page).
--   A longer key used to fail a versioned append with PostgreSQL's raw `index row size 3016
--   exceeds btree version 4 maximum 2704`, and only then. 200 + 1024 bytes with their headers is
--   under half of that, whatever the encoding: the limits count bytes (UTF-8), not characters.
--   They apply with and without an expected version, so that a stream does not become
--   unversionable by its name.
-- - event type 200 bytes: the registry's own rule (a letter, then up to 199 of [A-Za-z0-9_.:-],
--   ASCII, so characters are bytes); a longer name can never be registered, and is refused here
--   with the rule instead of as an unknown type.
-- - payload 64 MiB (67108864 bytes) in its stored jsonb form (pg_column_size, before TOAST
--   compression; within a few percent of the JSON text for most payloads): a quarter of jsonb's
--   hard limit (255 MiB, which PostgreSQL enforces before append is even called), far above what
--   one event should carry, and bounded so that one event cannot take a dispatcher's memory or a
--   sink's request size by surprise.
CREATE OR REPLACE FUNCTION highwater.append_limits(
    p_stream_type text,
    p_stream_id   text,
    p_event_type  text,
    p_payload     jsonb
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bytes bigint;
BEGIN
    v_bytes := octet_length(p_event_type);
    IF v_bytes > 200 THEN
        RAISE EXCEPTION 'event type "%…" is % bytes long; the limit is 200 bytes', left(p_event_type, 40), v_bytes
            USING ERRCODE = 'HW030',
                  HINT = 'event type names are a letter, then up to 199 letters, digits and . _ : - '
                         '(`highwater event-types list` shows the registered ones)';
    END IF;
    v_bytes := octet_length(p_stream_type);
    IF v_bytes > 200 THEN
        RAISE EXCEPTION 'stream type "%…" is % bytes long; the limit is 200 bytes (UTF-8)',
            left(p_stream_type, 40), v_bytes
            USING ERRCODE = 'HW030',
                  HINT = 'name the aggregate type in a short word, e.g. ''order''; '
                         'see "Limits" in docs/events.md';
    END IF;
    v_bytes := octet_length(p_stream_id);
    IF v_bytes > 1024 THEN
        RAISE EXCEPTION 'stream id "%…" of stream type "%" is % bytes long; the limit is 1024 bytes (UTF-8)',
            left(p_stream_id, 40), p_stream_type, v_bytes
            USING ERRCODE = 'HW030',
                  HINT = 'use a shorter id: a UUID, a number, or a hash of a long natural key (keep the key '
                         'itself in the payload); see "Limits" in docs/events.md';
    END IF;
    -- Uncompressed: an object or array concatenated with an empty array is itself, detoasted.
    v_bytes := CASE WHEN pg_column_compression(p_payload) IS NULL THEN pg_column_size(p_payload)
                    ELSE pg_column_size('[]'::jsonb || p_payload) END;
    IF v_bytes > 67108864 THEN
        RAISE EXCEPTION 'payload of event type "%" is % bytes (as jsonb); the limit is 67108864 bytes (64 MiB)',
            p_event_type, v_bytes
            USING ERRCODE = 'HW030',
                  HINT = 'keep large data out of the event: store it in a table or an object store and '
                         'put its key in the payload; see "Limits" in docs/events.md';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION highwater.append_limits(text, text, text, jsonb) FROM PUBLIC;
