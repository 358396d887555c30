-- The current schema of highwater, generated: do not edit. A fresh `highwater migrate` builds
-- exactly this (migrations/definitions/check.sh compares them in CI, and every upgrade with it).
-- Regenerate: WRITE_SCHEMA=1 migrations/definitions/check.sh /usr/lib/postgresql/15/bin
-- Partitions are renamed events_pN and their bounds bound_N (they depend on transaction ids).
--
-- PostgreSQL database dump
--

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: highwater; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA highwater;

--
-- Name: advance_stream_version(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.advance_stream_version() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    v_tx      pg_catalog.xid8;
    v_current bigint;
BEGIN
    INSERT INTO highwater.stream_versions AS s (stream_type, stream_id, version, tx_id)
    VALUES (NEW.stream_type, NEW.stream_id, NEW.stream_version, NEW.tx_id)
    ON CONFLICT (stream_type, stream_id) DO UPDATE
       SET version = excluded.version, tx_id = greatest(s.tx_id, excluded.tx_id)
     WHERE s.version OPERATOR(pg_catalog.<) excluded.version
    RETURNING s.tx_id INTO v_tx;
    IF v_tx IS NULL THEN
        SELECT s.version INTO v_current FROM highwater.stream_versions s
         WHERE s.stream_type OPERATOR(pg_catalog.=) NEW.stream_type
           AND s.stream_id OPERATOR(pg_catalog.=) NEW.stream_id;
        RAISE EXCEPTION 'stream %/% already has version % (it is at version %)',
            NEW.stream_type, NEW.stream_id, NEW.stream_version, v_current
            USING ERRCODE = 'HW003',
                  HINT = 'another writer appended first: reload the stream and retry';
    END IF;
    IF v_tx OPERATOR(pg_catalog.>) NEW.tx_id THEN
        NEW.tx_id := v_tx;
    END IF;
    RETURN NEW;
END
$$;

--
-- Name: append(text, text, text, jsonb, jsonb, text, bigint); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.append(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb DEFAULT NULL::jsonb, p_tenant_id text DEFAULT NULL::text, p_expected_version bigint DEFAULT NULL::bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    RETURN highwater.append(p_stream_type, p_stream_id, p_event_type, p_payload, p_metadata, p_tenant_id,
                            p_expected_version, NULL::pg_catalog.int4);
END
$$;

--
-- Name: append(text, text, text, jsonb, jsonb, text, bigint, integer); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.append(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb, p_tenant_id text, p_expected_version bigint, p_schema_version integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    v_known   boolean;
    v_schema  pg_catalog.jsonb;
    v_err     pg_catalog.text;
    v_meta    pg_catalog.jsonb := coalesce(p_metadata, '{}'::pg_catalog.jsonb);
    v_setting pg_catalog.text;
    v_tenant  pg_catalog.text := p_tenant_id;
    v_current bigint;
    v_version bigint;
    v_head_tx pg_catalog.xid8;
    v_id      bigint;
    v_latest  integer;
BEGIN
    -- The size limits (append_limits.sql, which says why and raises HW030): tested inline, so an
    -- append within them pays four length reads and no function call. A payload that reached
    -- here compressed (passed from a table's column) is measured uncompressed there.
    IF pg_catalog.octet_length(p_stream_type) OPERATOR(pg_catalog.>) 200
       OR pg_catalog.octet_length(p_stream_id) OPERATOR(pg_catalog.>) 1024
       OR pg_catalog.octet_length(p_event_type) OPERATOR(pg_catalog.>) 200
       OR pg_catalog.pg_column_size(p_payload) OPERATOR(pg_catalog.>) 67108864
       OR pg_catalog.pg_column_compression(p_payload) IS NOT NULL THEN
        PERFORM highwater.append_limits(p_stream_type, p_stream_id, p_event_type, p_payload);
    END IF;
    IF p_stream_type IS NULL OR p_stream_type OPERATOR(pg_catalog.=) ''
       OR p_stream_id IS NULL OR p_stream_id OPERATOR(pg_catalog.=) ''
       OR p_payload IS NULL
       OR pg_catalog.jsonb_typeof(v_meta) OPERATOR(pg_catalog.<>) 'object' THEN
        -- The error path: an unknown type is reported first, as it always was.
        PERFORM FROM highwater.event_types t WHERE t.event_type OPERATOR(pg_catalog.=) p_event_type;
        IF NOT FOUND THEN
            PERFORM highwater.unknown_event_type(p_event_type);
        END IF;
        IF p_stream_type IS NULL OR p_stream_type OPERATOR(pg_catalog.=) ''
           OR p_stream_id IS NULL OR p_stream_id OPERATOR(pg_catalog.=) '' THEN
            RAISE EXCEPTION 'stream type and stream id must not be empty'
                USING ERRCODE = 'HW002', HINT = 'pass the aggregate type and its id, e.g. (''order'', ''42'')';
        END IF;
        IF p_payload IS NULL THEN
            RAISE EXCEPTION 'payload of event type "%" is NULL', p_event_type
                USING ERRCODE = 'HW002', HINT = 'pass a JSON value; use ''{}'' for an event without data';
        END IF;
        RAISE EXCEPTION 'metadata must be a JSON object, got %', pg_catalog.jsonb_typeof(v_meta)
            USING ERRCODE = 'HW002';
    END IF;

    -- A handler running inside a SQL sink sets these, so what it appends is linked to its cause.
    IF NOT v_meta OPERATOR(pg_catalog.?) 'correlation_id' THEN
        v_setting := pg_catalog.current_setting('highwater.correlation_id', true);
        IF v_setting IS NULL OR v_setting OPERATOR(pg_catalog.=) '' THEN
            v_setting := pg_catalog.gen_random_uuid()::pg_catalog.text;
        END IF;
        v_meta := v_meta OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('correlation_id', v_setting);
    END IF;
    IF NOT v_meta OPERATOR(pg_catalog.?) 'causation_id' THEN
        v_setting := pg_catalog.current_setting('highwater.causation_id', true);
        IF v_setting OPERATOR(pg_catalog.<>) '' THEN
            v_meta := v_meta OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('causation_id', v_setting);
        END IF;
    END IF;
    -- The writer's trace (issue 48): from the metadata or the setting, checked by
    -- highwater.trace_context, which is called only when there is one (a malformed one is left
    -- out with a NOTICE, never an error). The tracestate setting is read only with a traceparent.
    IF v_meta OPERATOR(pg_catalog.?) 'traceparent' THEN
        v_meta := highwater.trace_context(v_meta, NULL, NULL);
    ELSE
        v_setting := pg_catalog.current_setting('highwater.traceparent', true);
        IF v_setting OPERATOR(pg_catalog.<>) '' THEN
            v_meta := highwater.trace_context(v_meta, v_setting,
                                              pg_catalog.current_setting('highwater.tracestate', true));
        END IF;
    END IF;
    IF v_tenant IS NULL THEN
        v_tenant := pg_catalog.current_setting('highwater.tenant_id', true);
        IF v_tenant OPERATOR(pg_catalog.=) '' THEN
            v_tenant := NULL;
        END IF;
    END IF;

    IF p_expected_version IS NULL AND p_schema_version IS NULL THEN
        -- The common case in one statement: inserts nothing when the type is unknown or has a
        -- schema to check (the slow path below).
        INSERT INTO highwater.events (stream_type, stream_id, event_type, tenant_id, payload, metadata,
                                      schema_version)
        SELECT p_stream_type, p_stream_id, t.event_type, v_tenant, p_payload, v_meta, t.latest_version
          FROM highwater.event_types t
         WHERE t.event_type OPERATOR(pg_catalog.=) p_event_type AND t.json_schema IS NULL
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;

    SELECT true, t.json_schema, t.latest_version INTO v_known, v_schema, v_latest
      FROM highwater.event_types t WHERE t.event_type OPERATOR(pg_catalog.=) p_event_type;
    IF v_known IS NULL THEN
        PERFORM highwater.unknown_event_type(p_event_type);
    END IF;
    IF p_schema_version IS NOT NULL
       AND p_schema_version OPERATOR(pg_catalog.<>) coalesce(v_latest, 1) THEN
        -- An earlier version: its own schema. (A type registered by a binary without versions has
        -- no version rows; its only version, 1, is the registry row's schema.)
        SELECT true, s.json_schema INTO v_known, v_schema
          FROM highwater.event_type_versions s
         WHERE s.event_type OPERATOR(pg_catalog.=) p_event_type
           AND s.version OPERATOR(pg_catalog.=) p_schema_version
           AND p_schema_version OPERATOR(pg_catalog.<) coalesce(v_latest, 1);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'event type "%" has no version % (its latest is %)',
                p_event_type, p_schema_version, coalesce(v_latest, 1)
                USING ERRCODE = 'HW004',
                      HINT = pg_catalog.format('append a registered version (1 to %s, or NULL for the latest), '
                                               'or register version %s first: `highwater event-types register %s '
                                               '--version %s --schema FILE`', coalesce(v_latest, 1),
                                               p_schema_version, p_event_type, p_schema_version);
        END IF;
        v_latest := p_schema_version;
    END IF;
    IF v_schema IS NOT NULL THEN
        v_err := highwater.json_schema_check(v_schema, p_payload);
        IF v_err IS NOT NULL THEN
            RAISE EXCEPTION 'payload of event type "%" fails its JSON Schema: %', p_event_type, v_err
                USING ERRCODE = 'HW002',
                      HINT = pg_catalog.format('fix the payload, or register a new version with '
                                               '`highwater event-types register %s --version N --schema FILE`',
                                               p_event_type);
        END IF;
    END IF;

    IF p_expected_version IS NULL THEN
        INSERT INTO highwater.events (stream_type, stream_id, event_type, tenant_id, payload, metadata,
                                      schema_version)
        VALUES (p_stream_type, p_stream_id, p_event_type, v_tenant, p_payload, v_meta, v_latest)
        RETURNING id INTO v_id;
        RETURN v_id;
    END IF;

    -- The stream's head row: one index probe whatever the partitions.
    SELECT s.version, s.tx_id INTO v_current, v_head_tx FROM highwater.stream_versions s
     WHERE s.stream_type OPERATOR(pg_catalog.=) p_stream_type
       AND s.stream_id OPERATOR(pg_catalog.=) p_stream_id;
    IF coalesce(v_current, 0) OPERATOR(pg_catalog.<>) p_expected_version THEN
        RAISE EXCEPTION 'stream %/% is at version %, expected %',
            p_stream_type, p_stream_id, coalesce(v_current, 0), p_expected_version
            USING ERRCODE = 'HW003',
                  HINT = 'another writer appended first: reload the stream and retry';
    END IF;
    v_version := p_expected_version OPERATOR(pg_catalog.+) 1;
    -- The stream-order tx_id is computed here, before the insert, so that the row is routed to
    -- the partition of that tx_id; the trigger events_advance_stream_version moves the head and
    -- refuses (HW003) if another writer took this version meanwhile. GREATEST compares with the
    -- type's default ordering, not an operator looked up by name.
    INSERT INTO highwater.events
        (tx_id, stream_type, stream_id, stream_version, event_type, tenant_id, payload, metadata, schema_version)
    VALUES (greatest(pg_catalog.pg_current_xact_id(), v_head_tx), p_stream_type, p_stream_id,
            v_version, p_event_type, v_tenant, p_payload, v_meta, v_latest)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

--
-- Name: append_limits(text, text, text, jsonb); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.append_limits(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: append_position(text, text, text, jsonb, jsonb, text, bigint); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.append_position(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb DEFAULT NULL::jsonb, p_tenant_id text DEFAULT NULL::text, p_expected_version bigint DEFAULT NULL::bigint, OUT id bigint, OUT tx_id xid8, OUT token xid8) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    id := highwater.append(p_stream_type, p_stream_id, p_event_type, p_payload, p_metadata,
                           p_tenant_id, p_expected_version);
    SELECT e.tx_id INTO tx_id FROM highwater.events e WHERE e.id = append_position.id;
    token := highwater.token();
END
$$;

--
-- Name: applied(text, xid8, text); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.applied(p_consumer text, p_token xid8, p_instance text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    v_next   xid8 := pg_snapshot_xmax(pg_current_snapshot());
    v_shared boolean;
    v_bound  xid8;
BEGIN
    IF p_token IS NULL OR p_consumer IS NULL THEN
        RAISE EXCEPTION 'consumer and token must not be NULL'
            USING ERRCODE = 'HW012', HINT = 'pass the consumer''s name and the token highwater.token() returned';
    END IF;
    SELECT c.delivery = 'Shared' INTO v_shared FROM highwater.consumers c WHERE c.name = p_consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no consumer named "%"', p_consumer
            USING ERRCODE = 'HW010', HINT = '`highwater consumer list` shows the consumers';
    END IF;
    IF v_shared AND p_instance IS NOT NULL THEN
        RAISE EXCEPTION 'consumer "%" is Shared: it has one shard, not one per instance', p_consumer
            USING ERRCODE = 'HW012', HINT = 'leave the instance out (NULL)';
    END IF;
    IF p_token >= v_next THEN
        RAISE EXCEPTION 'token % is ahead of this database''s next transaction id %', p_token, v_next
            USING ERRCODE = 'HW011',
                  HINT = 'a token is valid only in the database that issued it; after a restore from '
                         'a logical dump transaction ids restart: take a new token (highwater.token()) '
                         'after writing';
    END IF;
    v_bound := highwater.applied_bound(p_consumer, p_instance);
    RETURN p_token < v_bound;
END
$$;

--
-- Name: applied_bound(text, text); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.applied_bound(p_consumer text, p_instance text DEFAULT NULL::text) RETURNS xid8
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    v_fence    xid8 := highwater.fence();
    v_bound    xid8 := highwater.fence();
    v_types    text[];
    v_shared   boolean;
    v_tx       xid8;
    v_id       bigint;
    v_part     integer;
    v_parts    integer;
    v_first    xid8;
    v_shards   integer := 0;
BEGIN
    SELECT c.event_types, c.delivery = 'Shared' INTO v_types, v_shared
      FROM highwater.consumers c WHERE c.name = p_consumer;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR v_tx, v_id, v_part, v_parts IN
        SELECT s.cursor_tx, s.cursor_id, s.partition_index, s.partition_count
          FROM highwater.consumer_shards s
         WHERE s.consumer = p_consumer
           AND CASE WHEN v_shared THEN highwater.is_shared_shard(s.instance_id)
                    ELSE p_instance IS NULL OR s.instance_id = p_instance END
    LOOP
        v_shards := v_shards + 1;
        IF cardinality(v_types) = 1 THEN
            SELECT e.tx_id INTO v_first FROM highwater.events e
             WHERE e.event_type = v_types[1]
               AND (e.tx_id, e.id) > (v_tx, v_id) AND e.tx_id >= v_tx AND e.tx_id < v_fence
               AND (v_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, v_parts) = v_part)
             ORDER BY e.tx_id, e.id LIMIT 1;
        ELSE
            SELECT e.tx_id INTO v_first FROM highwater.events e
             WHERE (e.tx_id, e.id) > (v_tx, v_id) AND e.tx_id >= v_tx AND e.tx_id < v_fence
               AND (cardinality(v_types) = 0 OR e.event_type = ANY (v_types))
               AND (v_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, v_parts) = v_part)
             ORDER BY e.tx_id, e.id LIMIT 1;
        END IF;
        IF FOUND AND v_first < v_bound THEN
            v_bound := v_first;
        END IF;
    END LOOP;
    IF v_shards = 0 THEN
        RETURN '0'::xid8;
    END IF;
    RETURN v_bound;
END
$$;

--
-- Name: create_event_partitions(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.create_event_partitions() RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    v_width   bigint;
    v_ahead   integer;
    v_next    xid8 := pg_snapshot_xmax(pg_current_snapshot());
    v_top     xid8;
    v_hi      xid8;
    v_tail    xid8;
    v_target  numeric;
    v_name    text;
    v_created integer := 0;
BEGIN
    SELECT width, ahead INTO v_width, v_ahead FROM highwater.event_partitioning;
    -- xid8 has no arithmetic: bounds are computed as numeric and compared only as xid8. Nor, before
    -- PostgreSQL 15, a max(): the highest row is read with ORDER BY (btree order, as max() would).
    v_target := v_next::text::numeric + v_width * v_ahead;
    SELECT hi INTO v_top FROM highwater.event_partitions ORDER BY hi DESC LIMIT 1;
    IF v_top::text::numeric >= v_target THEN
        RETURN 0;
    END IF;

    -- Locks in the order every writer of these tables takes them (events, then the registry, as
    -- `events drop-partitions` does); one creator at a time, the others find nothing left to do.
    PERFORM set_config('lock_timeout', '1s', true);
    LOCK TABLE ONLY highwater.events IN ACCESS EXCLUSIVE MODE;
    LOCK TABLE highwater.event_partitions IN EXCLUSIVE MODE;
    SELECT hi INTO v_top FROM highwater.event_partitions ORDER BY hi DESC LIMIT 1;
    IF v_top::text::numeric >= v_target THEN
        RETURN 0;
    END IF;
    ALTER TABLE highwater.events DETACH PARTITION highwater.events_tail;
    SELECT tx_id INTO v_tail FROM highwater.events_tail ORDER BY tx_id DESC LIMIT 1;
    IF v_tail IS NOT NULL THEN
        v_hi := (v_tail::text::numeric + 1)::text::xid8;
        v_name := format('events_%s', v_top);
        EXECUTE format('ALTER TABLE highwater.events_tail RENAME TO %I', v_name);
        EXECUTE format('ALTER TABLE highwater.events ATTACH PARTITION highwater.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_top, v_hi);
        INSERT INTO highwater.event_partitions (name, lo, hi) VALUES (v_name, v_top, v_hi);
        v_top := v_hi;
        CREATE TABLE highwater.events_tail (LIKE highwater.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
        v_created := v_created + 1;
    END IF;
    -- Skip what nothing can be written into any more: below the fence every transaction has
    -- finished, and the tail (which held [v_top, ...)) is empty up to here.
    v_top := greatest(v_top, highwater.fence());
    WHILE v_top::text::numeric < v_target LOOP
        v_hi := (v_top::text::numeric + v_width)::text::xid8;
        v_name := format('events_%s', v_top);
        EXECUTE format('CREATE TABLE highwater.%I (LIKE highwater.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                       v_name);
        EXECUTE format('ALTER TABLE highwater.events ATTACH PARTITION highwater.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_top, v_hi);
        INSERT INTO highwater.event_partitions (name, lo, hi) VALUES (v_name, v_top, v_hi);
        v_top := v_hi;
        v_created := v_created + 1;
    END LOOP;
    EXECUTE format('ALTER TABLE highwater.events ATTACH PARTITION highwater.events_tail
                    FOR VALUES FROM (%L) TO (MAXVALUE)', v_top);
    RETURN v_created;
END
$$;

--
-- Name: dead_letter_parked_again(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.dead_letter_parked_again() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    UPDATE highwater.dead_letters d
       SET attempts = NEW.attempts, error = NEW.error, redriven_at = NULL
     WHERE d.consumer = NEW.consumer AND d.instance_id = NEW.instance_id AND d.event_id = NEW.event_id
       AND d.redriven_at IS NOT NULL AND d.redrive_at IS NULL;
    RETURN NEW;
END
$$;

--
-- Name: event_type_dry_run(text, integer); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.event_type_dry_run(p_event_type text, p_version integer) RETURNS TABLE(event_id bigint, from_version integer, problem text)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    v_schema  jsonb;
    v_payload jsonb;
    v_err     text;
    v_event   record;
BEGIN
    SELECT s.json_schema INTO v_schema FROM highwater.event_type_versions s
     WHERE s.event_type = p_event_type AND s.version = p_version;
    FOR v_event IN
        SELECT e.id, coalesce(e.schema_version, 1) AS version, e.payload FROM highwater.events e
         WHERE e.event_type IN (SELECT p_event_type
                                UNION ALL
                                SELECT a.alias FROM highwater.event_type_aliases a WHERE a.event_type = p_event_type)
           AND coalesce(e.schema_version, 1) < p_version
         ORDER BY e.tx_id, e.id
    LOOP
        BEGIN
            v_payload := highwater.upcast(p_event_type, v_event.version, v_event.payload, p_version);
        EXCEPTION WHEN OTHERS THEN
            event_id := v_event.id;
            from_version := v_event.version;
            problem := format('the upcast failed: %s (SQLSTATE %s)', SQLERRM, SQLSTATE);
            RETURN NEXT;
            RETURN;
        END;
        IF v_schema IS NOT NULL THEN
            v_err := highwater.json_schema_check(v_schema, v_payload);
            IF v_err IS NOT NULL THEN
                event_id := v_event.id;
                from_version := v_event.version;
                problem := format('the payload %s fails the schema of version %s: %s',
                                  left(v_payload::text, 200), p_version, v_err);
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;
    END LOOP;
END
$$;

SET default_tablespace = '';

--
-- Name: events; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.events (
    id bigint NOT NULL,
    tx_id xid8 DEFAULT pg_current_xact_id() NOT NULL,
    stream_type text NOT NULL,
    stream_id text NOT NULL,
    stream_version bigint,
    event_type text NOT NULL,
    tenant_id text,
    payload jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    schema_version integer,
    CONSTRAINT events_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT events_stream_version_check CHECK ((stream_version > 0))
)
PARTITION BY RANGE (tx_id);

--
-- Name: events_after(xid8, bigint, text[], bigint, bigint[]); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.events_after(p_tx xid8, p_id bigint, p_types text[], p_limit bigint, p_skip bigint[] DEFAULT '{}'::bigint[]) RETURNS SETOF highwater.events
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    IF p_limit <= 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_types) = 1 THEN
        RETURN QUERY
        SELECT * FROM highwater.events e
         WHERE e.event_type = p_types[1]
           AND (e.tx_id, e.id) > (p_tx, p_id)
           AND e.tx_id >= p_tx
           AND e.tx_id < highwater.fence()
           AND NOT (e.id = ANY (p_skip))
         ORDER BY e.tx_id, e.id
         LIMIT p_limit;
        RETURN;
    END IF;
    IF cardinality(p_types) BETWEEN 2 AND 4 THEN
        RETURN QUERY
        SELECT e.* FROM (SELECT DISTINCT u.t FROM unnest(p_types) u(t)) t
         CROSS JOIN LATERAL (
            SELECT * FROM highwater.events e
             WHERE e.event_type = t.t
               AND (e.tx_id, e.id) > (p_tx, p_id)
               AND e.tx_id >= p_tx
               AND e.tx_id < highwater.fence()
               AND NOT (e.id = ANY (p_skip))
             ORDER BY e.tx_id, e.id
             LIMIT p_limit) e
         ORDER BY e.tx_id, e.id
         LIMIT p_limit;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT * FROM highwater.events e
     WHERE (e.tx_id, e.id) > (p_tx, p_id)
       AND e.tx_id >= p_tx
       AND e.tx_id < highwater.fence()
       AND (cardinality(p_types) = 0 OR e.event_type = ANY (p_types))
       -- Seen by a read model's bootstrap (consumer_shards.bootstrap_seen): passed over.
       AND NOT (e.id = ANY (p_skip))
     ORDER BY e.tx_id, e.id
     LIMIT p_limit;
END
$$;

--
-- Name: fence(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.fence() RETURNS xid8
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN pg_snapshot_xmin(pg_current_snapshot());

--
-- Name: hw_upcasts(text, integer, jsonb, integer); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.hw_upcasts(p_event_type text, p_from integer, p_payload jsonb, p_to integer) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
-- Generated by highwater.upcast_generate from highwater.event_type_versions (do not edit).
DECLARE
    v jsonb := p_payload;
BEGIN
    RETURN v;
END
$$;

--
-- Name: FUNCTION hw_upcasts(p_event_type text, p_from integer, p_payload jsonb, p_to integer); Type: COMMENT; Schema: highwater; Owner: -
--

COMMENT ON FUNCTION highwater.hw_upcasts(p_event_type text, p_from integer, p_payload jsonb, p_to integer) IS 'The payload of an event of a type (not a former name) stored at version p_from, through the upcasts of its steps above it up to p_to (NULL: all); generated by highwater.upcast_generate (do not edit).';

--
-- Name: is_shared_shard(text); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.is_shared_shard(p_instance text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ((p_instance = '__shared__'::text) OR starts_with(p_instance, '__shared__/'::text));

--
-- Name: json_schema_check(jsonb, jsonb); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.json_schema_check(schema jsonb, doc jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$ SELECT highwater.json_schema_error(schema, doc, '$') $_$;

--
-- Name: json_schema_error(jsonb, jsonb, text); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.json_schema_error(schema jsonb, doc jsonb, path text DEFAULT '$'::text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    actual text := jsonb_typeof(doc);
    t text;
    k text;
    v jsonb;
    err text;
    matched boolean;
    i integer;
BEGIN
    IF schema IS NULL OR schema = 'true'::jsonb OR schema = '{}'::jsonb THEN
        RETURN NULL;
    END IF;
    IF schema = 'false'::jsonb THEN
        RETURN format('%s: no value is allowed here', path);
    END IF;

    IF schema ? 'type' THEN
        matched := false;
        FOR t IN SELECT x FROM jsonb_array_elements_text(
                CASE WHEN jsonb_typeof(schema -> 'type') = 'array' THEN schema -> 'type'
                     ELSE jsonb_build_array(schema -> 'type') END) AS x
        LOOP
            IF t = actual
               OR (t = 'integer' AND actual = 'number'
                   AND (doc #>> '{}')::numeric = trunc((doc #>> '{}')::numeric)) THEN
                matched := true;
            END IF;
        END LOOP;
        IF NOT matched THEN
            RETURN format('%s: expected type %s, got %s', path, schema -> 'type', actual);
        END IF;
    END IF;

    IF schema ? 'enum' AND NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(schema -> 'enum') AS e WHERE e = doc) THEN
        RETURN format('%s: %s is not one of %s', path, doc, schema -> 'enum');
    END IF;
    IF schema ? 'const' AND schema -> 'const' <> doc THEN
        RETURN format('%s: expected %s, got %s', path, schema -> 'const', doc);
    END IF;

    IF actual = 'object' THEN
        FOR k IN SELECT jsonb_array_elements_text(schema -> 'required') LOOP
            IF NOT doc ? k THEN
                RETURN format('%s: required property "%s" is missing', path, k);
            END IF;
        END LOOP;
        FOR k, v IN SELECT key, value FROM jsonb_each(schema -> 'properties') LOOP
            IF doc ? k THEN
                err := highwater.json_schema_error(v, doc -> k, path || '.' || k);
                IF err IS NOT NULL THEN RETURN err; END IF;
            END IF;
        END LOOP;
        IF schema ? 'additionalProperties' THEN
            FOR k IN SELECT jsonb_object_keys(doc) LOOP
                IF NOT coalesce((schema -> 'properties') ? k, false) THEN
                    IF schema -> 'additionalProperties' = 'false'::jsonb THEN
                        RETURN format('%s: property "%s" is not allowed', path, k);
                    END IF;
                    err := highwater.json_schema_error(schema -> 'additionalProperties', doc -> k,
                                                       path || '.' || k);
                    IF err IS NOT NULL THEN RETURN err; END IF;
                END IF;
            END LOOP;
        END IF;
        IF schema ? 'minProperties' AND (SELECT count(*) FROM jsonb_object_keys(doc))
                < (schema ->> 'minProperties')::int THEN
            RETURN format('%s: fewer than %s properties', path, schema ->> 'minProperties');
        END IF;
        IF schema ? 'maxProperties' AND (SELECT count(*) FROM jsonb_object_keys(doc))
                > (schema ->> 'maxProperties')::int THEN
            RETURN format('%s: more than %s properties', path, schema ->> 'maxProperties');
        END IF;
    ELSIF actual = 'array' THEN
        IF schema ? 'minItems' AND jsonb_array_length(doc) < (schema ->> 'minItems')::int THEN
            RETURN format('%s: fewer than %s items', path, schema ->> 'minItems');
        END IF;
        IF schema ? 'maxItems' AND jsonb_array_length(doc) > (schema ->> 'maxItems')::int THEN
            RETURN format('%s: more than %s items', path, schema ->> 'maxItems');
        END IF;
        IF schema ? 'items' THEN
            FOR i IN 0 .. jsonb_array_length(doc) - 1 LOOP
                err := highwater.json_schema_error(schema -> 'items', doc -> i,
                                                   path || '[' || i || ']');
                IF err IS NOT NULL THEN RETURN err; END IF;
            END LOOP;
        END IF;
    ELSIF actual = 'string' THEN
        IF schema ? 'minLength' AND char_length(doc #>> '{}') < (schema ->> 'minLength')::int THEN
            RETURN format('%s: shorter than %s characters', path, schema ->> 'minLength');
        END IF;
        IF schema ? 'maxLength' AND char_length(doc #>> '{}') > (schema ->> 'maxLength')::int THEN
            RETURN format('%s: longer than %s characters', path, schema ->> 'maxLength');
        END IF;
        IF schema ? 'pattern' AND NOT (doc #>> '{}') ~ (schema ->> 'pattern') THEN
            RETURN format('%s: %s does not match pattern %s', path, doc, schema -> 'pattern');
        END IF;
    ELSIF actual = 'number' THEN
        IF schema ? 'minimum' AND (doc #>> '{}')::numeric < (schema ->> 'minimum')::numeric THEN
            RETURN format('%s: %s is less than the minimum %s', path, doc, schema -> 'minimum');
        END IF;
        IF schema ? 'maximum' AND (doc #>> '{}')::numeric > (schema ->> 'maximum')::numeric THEN
            RETURN format('%s: %s is greater than the maximum %s', path, doc, schema -> 'maximum');
        END IF;
        IF schema ? 'exclusiveMinimum'
           AND (doc #>> '{}')::numeric <= (schema ->> 'exclusiveMinimum')::numeric THEN
            RETURN format('%s: %s is not greater than %s', path, doc, schema -> 'exclusiveMinimum');
        END IF;
        IF schema ? 'exclusiveMaximum'
           AND (doc #>> '{}')::numeric >= (schema ->> 'exclusiveMaximum')::numeric THEN
            RETURN format('%s: %s is not less than %s', path, doc, schema -> 'exclusiveMaximum');
        END IF;
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: notify_applied(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.notify_applied() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('highwater_applied', NEW.consumer);
    RETURN NULL;
END
$$;

--
-- Name: notify_events(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.notify_events() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
       OR EXISTS (SELECT FROM highwater.sleepers
                   WHERE asleep_until OPERATOR(pg_catalog.>) pg_catalog.now()) THEN
        PERFORM pg_catalog.pg_notify('highwater_events', '');
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: partition_instance(integer, integer); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.partition_instance(p_index integer, p_count integer) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN (p_count <= 1) THEN '__shared__'::text ELSE format('__shared__/p%sof%s'::text, p_index, p_count) END;

--
-- Name: record_pruned(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.record_pruned() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO highwater.pruned AS p (event_type, events, newest_id)
    SELECT o.event_type, count(*), max(o.id) FROM old_rows o GROUP BY o.event_type
    ON CONFLICT (event_type) DO UPDATE
        SET events = p.events + EXCLUDED.events,
            newest_id = greatest(p.newest_id, EXCLUDED.newest_id),
            last_pruned_at = now();
    RETURN NULL;
END
$$;

--
-- Name: remember_raised_tx_id(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.remember_raised_tx_id() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NEW.tx_id > coalesce(nullif(current_setting('highwater.raised_tx_id', true), '')::xid8, '0'::xid8) THEN
        PERFORM set_config('highwater.raised_tx_id', NEW.tx_id::text, true);
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: repartition(text, boolean); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.repartition(p_consumer text, p_refuse_dead boolean DEFAULT false) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    v_target    integer;
    v_suspended boolean;
    v_count     integer;
    v_current   integer;
    v_dead      text;
    v_tx        xid8;
    v_id        bigint;
    v_waiting   integer;
BEGIN
    SELECT c.partitions, c.suspended INTO v_target, v_suspended
      FROM highwater.consumers c WHERE c.name = p_consumer AND c.delivery = 'Shared' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'none';
    END IF;
    -- Lock the split's rows: a cursor update that commits before this counts in the barrier; one
    -- that waits for this lock re-checks the barrier written below.
    PERFORM 1 FROM highwater.consumer_shards s
      WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id) FOR UPDATE;
    SELECT count(*), max(coalesce(s.partition_count, 1)) INTO v_count, v_current
      FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id);
    IF v_count = 0 THEN
        RETURN 'none';
    END IF;
    IF v_current = v_target THEN
        -- N went back to the split in force before the switch: the barrier is lifted.
        UPDATE highwater.consumer_shards s SET barrier_tx = NULL, barrier_id = NULL, updated_at = now()
         WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id) AND s.barrier_tx IS NOT NULL;
        RETURN 'none';
    END IF;
    SELECT string_agg(format('%s (dead at event %s: %s)', s.instance_id, s.failing_event_id,
                             left(coalesce(s.last_error, ''), 200)), ', ' ORDER BY s.instance_id)
      INTO v_dead
      FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id) AND s.status = 'dead';
    IF v_dead IS NOT NULL AND p_refuse_dead THEN
        RAISE EXCEPTION 'consumer "%": partitions cannot change from % to % while a partition is dead: %',
                        p_consumer, v_current, v_target, v_dead
            USING ERRCODE = 'HW020',
                  HINT = format('resolve it first (`highwater consumer restart %s --instance ID` after fixing '
                                'the sink, or `highwater consumer skip %s --instance ID`), then apply again',
                                p_consumer, p_consumer);
    END IF;
    -- The barrier: the furthest cursor of the old split (kept if already set: no cursor passed it).
    SELECT s.barrier_tx, s.barrier_id INTO v_tx, v_id
      FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id) AND s.barrier_tx IS NOT NULL
     LIMIT 1;
    IF v_tx IS NULL THEN
        SELECT s.cursor_tx, s.cursor_id INTO v_tx, v_id
          FROM highwater.consumer_shards s
         WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id)
         ORDER BY s.cursor_tx DESC, s.cursor_id DESC LIMIT 1;
        UPDATE highwater.consumer_shards s SET barrier_tx = v_tx, barrier_id = v_id, updated_at = now()
         WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id);
    END IF;
    SELECT count(*) INTO v_waiting
      FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id)
       AND (s.cursor_tx, s.cursor_id) <> (v_tx, v_id);
    IF v_waiting > 0 THEN
        RETURN 'pending';
    END IF;
    DELETE FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id);
    INSERT INTO highwater.consumer_shards
           (consumer, instance_id, partition_index, partition_count, cursor_tx, cursor_id, status, heartbeat_at)
    SELECT p_consumer, highwater.partition_instance(g, v_target),
           CASE WHEN v_target > 1 THEN g END, CASE WHEN v_target > 1 THEN v_target END,
           v_tx, v_id, CASE WHEN v_suspended THEN 'disabled' ELSE 'idle' END, now()
      FROM generate_series(0, v_target - 1) g;
    PERFORM pg_notify('highwater_control', p_consumer);
    RETURN 'switched';
END
$$;

--
-- Name: shard_events_after(xid8, bigint, text[], bigint, bigint[], integer, integer, xid8, bigint); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.shard_events_after(p_tx xid8, p_id bigint, p_types text[], p_limit bigint, p_skip bigint[], p_part integer, p_parts integer, p_until_tx xid8, p_until_id bigint) RETURNS SETOF highwater.events
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    IF p_limit <= 0 OR (p_until_tx IS NOT NULL AND (p_tx, p_id) >= (p_until_tx, p_until_id)) THEN
        RETURN;
    END IF;
    IF cardinality(p_types) BETWEEN 1 AND 4 THEN
        RETURN QUERY
        SELECT e.* FROM (SELECT DISTINCT u.t FROM unnest(p_types) u(t)) t
         CROSS JOIN LATERAL (
            SELECT * FROM highwater.events e
             WHERE e.event_type = t.t
               AND (e.tx_id, e.id) > (p_tx, p_id)
               AND e.tx_id >= p_tx
               AND e.tx_id < highwater.fence()
               AND (p_until_tx IS NULL OR (e.tx_id <= p_until_tx AND (e.tx_id, e.id) <= (p_until_tx, p_until_id)))
               AND (p_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, p_parts) = p_part)
               AND NOT (e.id = ANY (p_skip))
             ORDER BY e.tx_id, e.id
             LIMIT p_limit) e
         ORDER BY e.tx_id, e.id
         LIMIT p_limit;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT * FROM highwater.events e
     WHERE (e.tx_id, e.id) > (p_tx, p_id)
       AND e.tx_id >= p_tx
       AND e.tx_id < highwater.fence()
       AND (p_until_tx IS NULL OR (e.tx_id <= p_until_tx AND (e.tx_id, e.id) <= (p_until_tx, p_until_id)))
       AND (cardinality(p_types) = 0 OR e.event_type = ANY (p_types))
       AND (p_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, p_parts) = p_part)
       AND NOT (e.id = ANY (p_skip))
     ORDER BY e.tx_id, e.id
     LIMIT p_limit;
END
$$;

--
-- Name: sql_sink_apply(text, text, text, boolean, xid8, xid8, bigint[]); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.sql_sink_apply(p_form text, p_statement text, p_role text, p_single boolean, p_lo xid8, p_hi xid8, p_ids bigint[], OUT failed integer, OUT deferred boolean, OUT message text) RETURNS record
    LANGUAGE plpgsql
    AS $_$
BEGIN
    EXECUTE format('SELECT * FROM pg_temp.%I($1, $2, $3, $4, $5, NULL)',
                   highwater.sql_sink_name(p_form, p_statement) || '_batch')
       INTO failed, deferred, message
      USING p_role, p_single, p_lo, p_hi, p_ids;
END
$_$;

--
-- Name: sql_sink_apply_positions(text, text, text, boolean, xid8[], bigint[]); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.sql_sink_apply_positions(p_form text, p_statement text, p_role text, p_single boolean, p_tx_ids xid8[], p_ids bigint[], OUT failed integer, OUT deferred boolean, OUT message text) RETURNS record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_n constant integer := coalesce(cardinality(p_ids), 0);
BEGIN
    IF coalesce(cardinality(p_tx_ids), 0) <> v_n THEN
        RAISE EXCEPTION 'highwater.sql_sink_apply_positions: p_tx_ids has % transaction ids for % event ids',
            coalesce(cardinality(p_tx_ids), 0), v_n
        USING HINT = 'pass one transaction id per event, in the same order: p_tx_ids[i] is the tx_id of the event p_ids[i]';
    END IF;
    EXECUTE format('SELECT * FROM pg_temp.%I($1, $2, $3, $4, $5, $6)',
                   highwater.sql_sink_name(p_form, p_statement) || '_batch')
       INTO failed, deferred, message
      USING p_role, p_single, p_tx_ids[1], p_tx_ids[v_n], p_ids, p_tx_ids;
END
$_$;

--
-- Name: sql_sink_name(text, text); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.sql_sink_name(p_form text, p_statement text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'hw_sink7_' || md5(p_form || ':' || p_statement) $$;

--
-- Name: sql_sink_prepare(text, text); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.sql_sink_prepare(p_form text, p_statement text) RETURNS text
    LANGUAGE plpgsql
    AS $_$
DECLARE
    p_name constant text := highwater.sql_sink_name(p_form, p_statement);
    v_sig text;
    v_statement text;
    v_rows boolean;
    v_message text;
    v_state text;
    v_batch_args constant text :=
        'p_role text, p_single boolean, p_lo xid8, p_hi xid8, p_ids bigint[], p_tx_ids xid8[], '
        'OUT failed integer, OUT deferred boolean, OUT message text';
    v_declare constant text := $d$
DECLARE
    v_cur integer := 0;
    v_n constant integer := coalesce(cardinality(p_ids), 0);
    v_role boolean := true;
    v_state text;
    v_set text;
    v_done integer;
    v_missing boolean := false;
    v_traced boolean := false;
    -- Dense batches walk their range, sparse ones are looked up by position (see above).
    v_walk constant boolean := abs(p_ids[v_n] - p_ids[1]) < 4 * v_n;
    r highwater.events;
    -- A consumer with `eventVersions` (docs/consumers.md): the payloads go through their
    -- upcasts (highwater.upcast_for); without, the setting is empty and the payload is as stored.
    -- They are computed here, before the sink's role is taken: the role has no rights on the
    -- schema (the upcasts read the registry), and the code it runs never names it.
    v_versions constant jsonb := nullif(current_setting('highwater.event_versions', true), '')::jsonb;
    v_upcast jsonb[];
BEGIN
    deferred := false;
    -- A batch named by its ids alone (`highwater.sql_sink_apply`, which a previous release's
    -- dispatcher calls during a rolling upgrade): its transaction ids are read once, from one
    -- walk of its range (OFFSET 0 keeps the walk whole: a join clause pushed into it would scan
    -- the range once per id), NULL for an id the range does not hold.
    IF p_tx_ids IS NULL AND v_n > 0 AND (NOT v_walk OR v_versions IS NOT NULL) THEN
        p_tx_ids := ARRAY(SELECT w.tx_id FROM unnest(p_ids) WITH ORDINALITY u(id, i)
                            LEFT JOIN (SELECT e.tx_id, e.id FROM highwater.events e
                                        WHERE (e.tx_id, e.id) >= (p_lo, p_ids[1]) AND e.tx_id >= p_lo
                                          AND (e.tx_id, e.id) <= (p_hi, p_ids[v_n]) AND e.tx_id <= p_hi
                                       OFFSET 0) w ON w.id = u.id
                           ORDER BY u.i);
    END IF;
    IF v_versions IS NOT NULL THEN
        -- One payload per event of the batch, in its order, each looked up by its position
        -- (NULL for one not found: the loop reports the batch's missing events as before).
        v_upcast := ARRAY(SELECT x.payload FROM unnest(p_tx_ids, p_ids) WITH ORDINALITY u(tx_id, id, i)
                           LEFT JOIN LATERAL (
                               SELECT highwater.upcast_for(e.event_type, e.schema_version, e.payload, v_versions) AS payload
                                 FROM highwater.events e
                                WHERE e.tx_id = u.tx_id AND e.id = u.id AND e.tx_id >= p_lo AND e.tx_id <= p_hi) x ON true
                          ORDER BY u.i);
        IF to_regclass('pg_temp.highwater_upcast') IS NOT NULL THEN
            DELETE FROM pg_temp.highwater_upcast;
            INSERT INTO pg_temp.highwater_upcast SELECT u.id, u.payload FROM unnest(p_ids, v_upcast) u(id, payload);
        END IF;
    END IF;
$d$;
    -- The batch's range in delivery order; `CONTINUE` passes over the range's events that are
    -- not the next of the batch. Both forms loop over it when they go one event at a time.
    v_range constant text := $r$
        FOR r IN SELECT * FROM (
                   SELECT * FROM highwater.events e
                    WHERE v_walk
                      AND (e.tx_id, e.id) >= (p_lo, p_ids[1]) AND e.tx_id >= p_lo
                      AND (e.tx_id, e.id) <= (p_hi, p_ids[v_n]) AND e.tx_id <= p_hi
                    ORDER BY e.tx_id, e.id) w
                 UNION ALL
                 SELECT * FROM (
                   SELECT e.* FROM unnest(p_tx_ids, p_ids) WITH ORDINALITY u(tx_id, id, i)
                    CROSS JOIN LATERAL (
                       SELECT * FROM highwater.events e
                        WHERE NOT v_walk AND e.tx_id = u.tx_id AND e.id = u.id
                          AND e.tx_id >= p_lo AND e.tx_id <= p_hi
                       OFFSET 0) e
                    ORDER BY u.i) p LOOP
            CONTINUE WHEN v_cur >= v_n OR r.id <> p_ids[v_cur + 1];
            v_cur := v_cur + 1;
$r$;
    -- What a failure reports. OTHERS does not cover query_canceled (statement_timeout), which
    -- is named so that a timeout is reported like any failure. Events the range did not hold
    -- fail the call outside the handler: that is the batch's error, not an event's.
    v_handler constant text := $h$
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
        message := message || ' (SQLSTATE ' || v_state || ')';
        failed := greatest(v_cur - 1, 0);
        deferred := v_state = '57014' AND v_cur > 1;
    END;
    IF failed IS NULL AND %s AND v_cur <> v_n THEN
        RAISE EXCEPTION 'highwater: events of the batch were not found: event %% is gone (the %% before it in the batch of %% were there)',
            p_ids[v_cur + 1], v_cur, v_n;
    END IF;
END $h$;
BEGIN
    IF to_regprocedure(format('pg_temp.%I(text, boolean, xid8, xid8, bigint[], xid8[])', p_name || '_batch')) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    IF p_form = 'perEvent' THEN
        -- The statement becomes a PL/pgSQL function of the nine parameters ($1..$9 keep their
        -- meaning): PL/pgSQL keeps its plan for the session, where a SQL function would set up
        -- its executor on every call. A statement that returns rows (SELECT, RETURNING) cannot
        -- stand alone in PL/pgSQL, so it runs as a loop that discards them; a SQL function that
        -- must return rows tells which kind it is, and checks the statement on the way.
        v_sig := 'jsonb, bigint, text, text, text, text, jsonb, bigint, timestamptz';
        v_statement := rtrim(p_statement, E' \t\r\n;');
        BEGIN
            EXECUTE format('CREATE FUNCTION pg_temp.%I(%s) RETURNS SETOF record LANGUAGE sql AS %L',
                           p_name || '_check', v_sig, v_statement);
            v_rows := true;
        EXCEPTION WHEN invalid_function_definition THEN
            v_rows := false;
        END;
        EXECUTE format('CREATE FUNCTION pg_temp.%I(%s) RETURNS integer LANGUAGE plpgsql AS %L',
                       p_name, v_sig,
                       E'#variable_conflict use_column\nDECLARE highwater_discarded record;\nBEGIN\n'
                       || CASE WHEN v_rows THEN 'FOR highwater_discarded IN ' || v_statement
                                                || E'\nLOOP END LOOP;'
                               ELSE v_statement || E'\n;' END
                       || E'\nRETURN 0;\nEND');
        EXECUTE format($body$
CREATE FUNCTION pg_temp.%I(%s) LANGUAGE plpgsql AS $loop$
%s
    BEGIN
%s
            -- The sink's role from its first event on: the range's query opened before it.
            IF v_role THEN
                v_set := set_config('role', coalesce(p_role, 'none'), true);
                v_role := false;
            END IF;
            v_set := set_config('highwater.tenant_id', coalesce(r.tenant_id, ''), true);
            v_set := set_config('highwater.correlation_id',
                                CASE WHEN jsonb_typeof(r.metadata -> 'correlation_id') = 'string'
                                     THEN r.metadata ->> 'correlation_id' ELSE '' END, true);
            v_set := set_config('highwater.causation_id', r.id::text, true);
            -- The writer's trace (trace_context.sql), set only for an event that has one and
            -- cleared after it: an untraced batch pays one key test per event.
            IF r.metadata ? 'traceparent' OR v_traced THEN
                v_traced := r.metadata ? 'traceparent';
                v_set := set_config('highwater.traceparent', coalesce(r.metadata ->> 'traceparent', ''), true);
                v_set := set_config('highwater.tracestate', coalesce(r.metadata ->> 'tracestate', ''), true);
            END IF;
            v_done := pg_temp.%I(CASE WHEN v_versions IS NULL THEN r.payload ELSE v_upcast[v_cur] END, r.id, r.stream_type, r.stream_id, r.event_type,
                                 r.tenant_id, r.metadata, r.stream_version, r.created_at);
        END LOOP;
        PERFORM set_config('role', 'none', true), set_config('highwater.tenant_id', '', true);
        IF v_traced THEN
            PERFORM set_config('highwater.traceparent', '', true), set_config('highwater.tracestate', '', true);
        END IF;
    %s
$loop$ $body$, p_name || '_batch', v_batch_args, v_declare, v_range, p_name, format(v_handler, 'true'));
    ELSIF p_form = 'set' THEN
        -- The batch's upcast payloads (a consumer with `eventVersions`), written by the batch
        -- function before it takes the sink's role; the view joins them only while the setting
        -- says so (a one-time filter: other consumers' statements never read the table).
        CREATE TEMPORARY TABLE IF NOT EXISTS highwater_upcast (id bigint PRIMARY KEY, payload jsonb);
        EXECUTE $v$
            CREATE OR REPLACE TEMPORARY VIEW highwater_batch AS
            SELECT coalesce(u.payload, e.payload) AS payload,
                   e.id, e.stream_type, e.stream_id, e.event_type, e.tenant_id,
                   e.metadata, e.stream_version, e.created_at
              FROM highwater.events e
              LEFT JOIN pg_temp.highwater_upcast u
                ON u.id = e.id AND coalesce(current_setting('highwater.event_versions', true), '') <> ''
             WHERE (e.tx_id, e.id) >= (current_setting('highwater.batch_lo')::xid8,
                                       current_setting('highwater.batch_first')::bigint)
               AND e.tx_id >= current_setting('highwater.batch_lo')::xid8
               AND (e.tx_id, e.id) <= (current_setting('highwater.batch_hi')::xid8,
                                       current_setting('highwater.batch_last')::bigint)
               AND e.tx_id <= current_setting('highwater.batch_hi')::xid8
               AND e.id IN (SELECT unnest(current_setting('highwater.batch_ids')::bigint[]))$v$;
        -- The sink's role reads the batch through the view (with the view owner's rights on
        -- highwater.events); the view is visible to this session only.
        GRANT SELECT ON pg_temp.highwater_batch TO PUBLIC;
        EXECUTE format('CREATE FUNCTION pg_temp.%I() RETURNS void LANGUAGE sql AS %L',
                       p_name, p_statement);
        EXECUTE format($body$
CREATE FUNCTION pg_temp.%I(%s) LANGUAGE plpgsql AS $loop$
%s
    BEGIN
        IF NOT p_single THEN
            PERFORM set_config('highwater.batch_lo', p_lo::text, true),
                    set_config('highwater.batch_hi', p_hi::text, true),
                    set_config('highwater.batch_first', p_ids[1]::text, true),
                    set_config('highwater.batch_last', p_ids[v_n]::text, true),
                    set_config('highwater.batch_ids', p_ids::text, true);
            -- Every event of the batch must be there, as the per-event loop requires: a
            -- statement over a batch that lost events (pruned after the read) would apply the
            -- rest and the cursor would pass the missing ones. One count of the batch's range;
            -- the first missing event is looked for only when one is.
            IF (SELECT count(*) FROM pg_temp.highwater_batch) <> v_n THEN
                v_missing := true;
                SELECT u.i - 1 INTO v_cur FROM unnest(p_ids) WITH ORDINALITY u(id, i)
                 WHERE u.id NOT IN (SELECT b.id FROM pg_temp.highwater_batch b) ORDER BY u.i LIMIT 1;
            ELSE
                PERFORM set_config('role', coalesce(p_role, 'none'), true);
                PERFORM pg_temp.%I();
            END IF;
        ELSE
%s
                -- The view narrowed to this one event.
                PERFORM set_config('highwater.batch_lo', r.tx_id::text, true),
                        set_config('highwater.batch_hi', r.tx_id::text, true),
                        set_config('highwater.batch_first', r.id::text, true),
                        set_config('highwater.batch_last', r.id::text, true),
                        set_config('highwater.batch_ids', ARRAY[r.id]::text, true),
                        set_config('role', coalesce(p_role, 'none'), true);
                PERFORM pg_temp.%I();
                PERFORM set_config('role', 'none', true);
            END LOOP;
        END IF;
        PERFORM set_config('role', 'none', true), set_config('highwater.batch_ids', '{}', true);
    %s
$loop$ $body$, p_name || '_batch', v_batch_args, v_declare, p_name, v_range, p_name,
           format(v_handler, '(p_single OR v_missing)'));
    ELSE
        RETURN format('unknown SQL sink form "%s"', p_form);
    END IF;
    RETURN NULL;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
    RETURN v_message || ' (SQLSTATE ' || v_state || ')';
END
$_$;

--
-- Name: sql_sink_refused(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.sql_sink_refused() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'highwater: the shard changed while its batch ran (an operator''s command or a deletion); nothing of the batch was applied'
        USING ERRCODE = 'ZH001';
END
$$;

--
-- Name: stream_partition(text, text, integer); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.stream_partition(p_stream_type text, p_stream_id text, p_partitions integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (((hashtextextended(((p_stream_type || ''::text) || p_stream_id), (0)::bigint) & '9223372036854775807'::bigint) % (GREATEST(p_partitions, 1))::bigint))::integer;

--
-- Name: token(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.token() RETURNS xid8
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE
        WHEN pg_current_xact_id_if_assigned() IS NULL
            THEN ((pg_snapshot_xmax(pg_current_snapshot())::text::numeric - 1)::text)::xid8
        ELSE greatest(pg_current_xact_id_if_assigned(),
                      nullif(current_setting('highwater.raised_tx_id', true), '')::xid8)
    END
$$;

--
-- Name: trace_context(jsonb, text, text); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.trace_context(p_meta jsonb, p_traceparent text, p_tracestate text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_parent pg_catalog.text := p_traceparent;
    v_state  pg_catalog.text := p_tracestate;
    v_meta   pg_catalog.jsonb := p_meta;
BEGIN
    IF v_meta OPERATOR(pg_catalog.?) 'traceparent' THEN
        -- The explicit context: taken from the metadata, checked there, removed if malformed.
        v_parent := CASE WHEN pg_catalog.jsonb_typeof(v_meta OPERATOR(pg_catalog.->) 'traceparent')
                                  OPERATOR(pg_catalog.=) 'string'
                         THEN v_meta OPERATOR(pg_catalog.->>) 'traceparent' END;
        v_state := CASE WHEN pg_catalog.jsonb_typeof(v_meta OPERATOR(pg_catalog.->) 'tracestate')
                                 OPERATOR(pg_catalog.=) 'string'
                        THEN v_meta OPERATOR(pg_catalog.->>) 'tracestate' END;
        v_meta := v_meta OPERATOR(pg_catalog.-) 'traceparent'::pg_catalog.text
                         OPERATOR(pg_catalog.-) 'tracestate'::pg_catalog.text;
    END IF;
    IF v_parent IS NULL OR v_parent OPERATOR(pg_catalog.=) '' THEN
        RETURN v_meta;
    END IF;
    IF NOT (v_parent OPERATOR(pg_catalog.~) '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$')
       OR pg_catalog.substr(v_parent, 1, 2) OPERATOR(pg_catalog.=) 'ff'
       OR (pg_catalog.substr(v_parent, 1, 2) OPERATOR(pg_catalog.=) '00'
           AND pg_catalog.length(v_parent) OPERATOR(pg_catalog.<>) 55)
       OR pg_catalog.substr(v_parent, 4, 32) OPERATOR(pg_catalog.=) '00000000000000000000000000000000'
       OR pg_catalog.substr(v_parent, 37, 16) OPERATOR(pg_catalog.=) '0000000000000000' THEN
        RAISE NOTICE 'highwater: traceparent % is not W3C Trace Context; the event is appended without it',
            pg_catalog.quote_literal(pg_catalog.left(v_parent, 80))
            USING HINT = 'expected 00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>, '
                         'as OpenTelemetry''s propagators write it';
        RETURN v_meta;
    END IF;
    v_meta := v_meta OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('traceparent', v_parent);
    IF v_state IS NOT NULL AND v_state OPERATOR(pg_catalog.<>) '' THEN
        IF pg_catalog.length(v_state) OPERATOR(pg_catalog.>) 512
           OR NOT (v_state OPERATOR(pg_catalog.~) '^[\x20-\x7e]*$') THEN
            RAISE NOTICE 'highwater: tracestate is not W3C Trace Context (over 512 characters or not printable ASCII); '
                         'the event keeps its traceparent without it';
        ELSE
            v_meta := v_meta OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('tracestate', v_state);
        END IF;
    END IF;
    RETURN v_meta;
END
$_$;

--
-- Name: unknown_event_type(text); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.unknown_event_type(p_event_type text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

--
-- Name: upcast(text, integer, jsonb, integer); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.upcast(p_event_type text, p_version integer, p_payload jsonb, p_to integer DEFAULT NULL::integer) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    v_type text;
BEGIN
    SELECT a.event_type INTO v_type FROM highwater.event_type_aliases a WHERE a.alias = p_event_type;
    IF NOT FOUND THEN
        v_type := p_event_type;
    END IF;
    RETURN highwater.hw_upcasts(v_type, coalesce(p_version, 1), p_payload, p_to);
END
$$;

--
-- Name: FUNCTION upcast(p_event_type text, p_version integer, p_payload jsonb, p_to integer); Type: COMMENT; Schema: highwater; Owner: -
--

COMMENT ON FUNCTION highwater.upcast(p_event_type text, p_version integer, p_payload jsonb, p_to integer) IS 'The payload of an event stored at a schema version, upcast to the latest version of its type (or p_to).';

--
-- Name: upcast_for(text, integer, jsonb, jsonb); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.upcast_for(p_event_type text, p_version integer, p_payload jsonb, p_want jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    v_type text;
    v_want jsonb;
BEGIN
    SELECT a.event_type INTO v_type FROM highwater.event_type_aliases a WHERE a.alias = p_event_type;
    v_want := coalesce(p_want -> coalesce(v_type, p_event_type), p_want -> p_event_type, p_want -> '*');
    IF v_want IS NULL OR jsonb_typeof(v_want) = 'null' OR v_want = '"stored"' THEN
        RETURN p_payload;
    ELSIF jsonb_typeof(v_want) = 'number' THEN
        RETURN highwater.upcast(p_event_type, p_version, p_payload, (v_want #>> '{}')::integer);
    END IF;
    RETURN highwater.upcast(p_event_type, p_version, p_payload);
END
$$;

--
-- Name: upcast_generate(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.upcast_generate() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET check_function_bodies TO 'off'
    AS $_$
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
$_$;

--
-- Name: FUNCTION upcast_generate(); Type: COMMENT; Schema: highwater; Owner: -
--

COMMENT ON FUNCTION highwater.upcast_generate() IS 'Generates the functions that apply the registered upcasts (highwater.hw_upcasts and one per version step) from highwater.event_type_versions; idempotent.';

--
-- Name: upcasts_changed(); Type: FUNCTION; Schema: highwater; Owner: -
--

CREATE FUNCTION highwater.upcasts_changed() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM highwater.upcast_generate();
    RETURN NULL;
END
$$;

SET default_table_access_method = heap;

--
-- Name: consumer_flow; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.consumer_flow (
    consumer text NOT NULL,
    paused_until timestamp with time zone,
    pause_reason text,
    tokens double precision DEFAULT 0 NOT NULL,
    refilled_at timestamp with time zone DEFAULT now() NOT NULL,
    throttled_until timestamp with time zone,
    throttled_ms bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: consumer_shards; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.consumer_shards (
    consumer text NOT NULL,
    instance_id text NOT NULL,
    cursor_tx xid8 DEFAULT '0'::xid8 NOT NULL,
    cursor_id bigint DEFAULT 0 NOT NULL,
    status text DEFAULT 'idle'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    failing_event_id bigint,
    next_attempt_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    pod_uid text,
    delivered_count bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    rebuild_started_at timestamp with time zone,
    rebuild_base bigint,
    rebuild_total bigint,
    rebuild_target_tx xid8,
    rebuild_target_id bigint,
    bootstrap_pending boolean DEFAULT false NOT NULL,
    bootstrap_snapshot pg_snapshot,
    bootstrap_seen bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    partition_index integer,
    partition_count integer,
    barrier_tx xid8,
    barrier_id bigint,
    CONSTRAINT consumer_shards_barrier CHECK (((barrier_tx IS NULL) = (barrier_id IS NULL))),
    CONSTRAINT consumer_shards_instance_id_check CHECK ((instance_id <> ''::text)),
    CONSTRAINT consumer_shards_partition CHECK ((((partition_index IS NULL) AND (partition_count IS NULL)) OR (((partition_count >= 2) AND (partition_count <= 256)) AND (partition_index >= 0) AND (partition_index < partition_count)))),
    CONSTRAINT consumer_shards_status_check CHECK ((status = ANY (ARRAY['idle'::text, 'processing'::text, 'dead'::text, 'disabled'::text])))
);

--
-- Name: consumers; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.consumers (
    name text NOT NULL,
    delivery text NOT NULL,
    consumer_group text DEFAULT 'default'::text NOT NULL,
    max_attempts integer DEFAULT 10 NOT NULL,
    batch_size integer DEFAULT 100 NOT NULL,
    event_types text[] DEFAULT '{}'::text[] NOT NULL,
    start_from text NOT NULL,
    error_mode text DEFAULT 'halt'::text NOT NULL,
    suspended boolean DEFAULT false NOT NULL,
    sink jsonb NOT NULL,
    spec jsonb NOT NULL,
    source text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    partitions integer DEFAULT 1 NOT NULL,
    CONSTRAINT consumers_batch_size_check CHECK (((batch_size >= 1) AND (batch_size <= 10000))),
    CONSTRAINT consumers_delivery_check CHECK ((delivery = ANY (ARRAY['Shared'::text, 'PerInstance'::text]))),
    CONSTRAINT consumers_error_mode_check CHECK ((error_mode = ANY (ARRAY['halt'::text, 'skip'::text, 'skipStream'::text]))),
    CONSTRAINT consumers_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 1000))),
    CONSTRAINT consumers_name_check CHECK ((name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'::text)),
    CONSTRAINT consumers_partitions_check CHECK (((partitions >= 1) AND (partitions <= 256))),
    CONSTRAINT consumers_start_from_check CHECK ((start_from = ANY (ARRAY['earliest'::text, 'latest'::text])))
);

--
-- Name: dead_letters; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.dead_letters (
    consumer text NOT NULL,
    instance_id text NOT NULL,
    event_id bigint NOT NULL,
    attempts integer NOT NULL,
    error text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    redrive_requested_at timestamp with time zone,
    redrive_by text,
    redrive_reason text,
    redrive_at timestamp with time zone,
    redrive_instance text,
    redriven_at timestamp with time zone,
    blocked_by bigint,
    discarded_at timestamp with time zone,
    discarded_by text,
    discard_reason text
);

--
-- Name: dispatchers; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.dispatchers (
    instance_id text NOT NULL,
    consumer_group text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    binary_schema integer,
    CONSTRAINT dispatchers_instance_id_check CHECK ((instance_id <> ''::text))
);

--
-- Name: event_partitioning; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.event_partitioning (
    singleton boolean DEFAULT true NOT NULL,
    width bigint DEFAULT 10000000 NOT NULL,
    ahead integer DEFAULT 2 NOT NULL,
    CONSTRAINT event_partitioning_ahead_check CHECK (((ahead >= 1) AND (ahead <= 100))),
    CONSTRAINT event_partitioning_singleton_check CHECK (singleton),
    CONSTRAINT event_partitioning_width_check CHECK ((width >= 100))
);

--
-- Name: event_partitions; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.event_partitions (
    name text NOT NULL,
    lo xid8 NOT NULL,
    hi xid8 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT event_partitions_check CHECK ((hi > lo))
);

--
-- Name: event_type_aliases; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.event_type_aliases (
    alias text NOT NULL,
    event_type text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT event_type_aliases_check CHECK ((event_type <> alias))
);

--
-- Name: event_type_versions; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.event_type_versions (
    event_type text NOT NULL,
    version integer NOT NULL,
    json_schema jsonb,
    upcast text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT event_type_versions_check CHECK (((upcast IS NULL) OR (version > 1))),
    CONSTRAINT event_type_versions_version_check CHECK ((version > 0))
);

--
-- Name: event_types; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.event_types (
    event_type text NOT NULL,
    json_schema jsonb,
    description text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    latest_version integer,
    compatibility text DEFAULT 'backward'::text NOT NULL,
    CONSTRAINT event_types_compatibility_check CHECK ((compatibility = ANY (ARRAY['backward'::text, 'backward_transitive'::text, 'forward'::text, 'forward_transitive'::text, 'full'::text, 'full_transitive'::text, 'none'::text]))),
    CONSTRAINT event_types_event_type_check CHECK ((event_type ~ '^[A-Za-z][A-Za-z0-9_.:-]{0,199}$'::text)),
    CONSTRAINT event_types_latest_version_check CHECK ((latest_version > 1))
);

--
-- Name: events_p3; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.events_p3 (
    id bigint NOT NULL,
    tx_id xid8 DEFAULT pg_current_xact_id() NOT NULL,
    stream_type text NOT NULL,
    stream_id text NOT NULL,
    stream_version bigint,
    event_type text NOT NULL,
    tenant_id text,
    payload jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    schema_version integer,
    CONSTRAINT events_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT events_stream_version_check CHECK ((stream_version > 0))
);

--
-- Name: events_p2; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.events_p2 (
    id bigint NOT NULL,
    tx_id xid8 DEFAULT pg_current_xact_id() NOT NULL,
    stream_type text NOT NULL,
    stream_id text NOT NULL,
    stream_version bigint,
    event_type text NOT NULL,
    tenant_id text,
    payload jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    schema_version integer,
    CONSTRAINT events_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT events_stream_version_check CHECK ((stream_version > 0))
);

--
-- Name: events_id_seq; Type: SEQUENCE; Schema: highwater; Owner: -
--

ALTER TABLE highwater.events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME highwater.events_id_seq
    START WITH N
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: events_legacy; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.events_legacy (
    id bigint NOT NULL,
    tx_id xid8 DEFAULT pg_current_xact_id() NOT NULL,
    stream_type text NOT NULL,
    stream_id text NOT NULL,
    stream_version bigint,
    event_type text NOT NULL,
    tenant_id text,
    payload jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    schema_version integer,
    CONSTRAINT events_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT events_stream_version_check CHECK ((stream_version > 0))
);

--
-- Name: events_tail; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.events_tail (
    id bigint NOT NULL,
    tx_id xid8 DEFAULT pg_current_xact_id() NOT NULL,
    stream_type text NOT NULL,
    stream_id text NOT NULL,
    stream_version bigint,
    event_type text NOT NULL,
    tenant_id text,
    payload jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    schema_version integer,
    CONSTRAINT events_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT events_stream_version_check CHECK ((stream_version > 0))
);

--
-- Name: pruned; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.pruned (
    event_type text NOT NULL,
    events bigint NOT NULL,
    newest_id bigint NOT NULL,
    last_pruned_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: replay_requests; Type: SEQUENCE; Schema: highwater; Owner: -
--

CREATE SEQUENCE highwater.replay_requests
    START WITH N
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: replays; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.replays (
    request_id bigint NOT NULL,
    consumer text NOT NULL,
    instance_id text NOT NULL,
    event_id bigint NOT NULL,
    seq integer NOT NULL,
    stream_type text NOT NULL,
    stream_id text NOT NULL,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    requested_by text NOT NULL,
    reason text,
    due_at timestamp with time zone,
    replayed_at timestamp with time zone,
    error text
);

--
-- Name: schema_version; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.schema_version (
    singleton boolean DEFAULT true NOT NULL,
    version integer NOT NULL,
    oldest_binary integer NOT NULL,
    release text NOT NULL,
    definitions_checksum bytea NOT NULL,
    migrated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schema_version_check CHECK (((oldest_binary >= 1) AND (oldest_binary <= version))),
    CONSTRAINT schema_version_singleton_check CHECK (singleton),
    CONSTRAINT schema_version_version_check CHECK ((version > 0))
);

--
-- Name: shard_changes; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.shard_changes (
    id bigint NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    consumer text NOT NULL,
    instance_id text NOT NULL,
    action text NOT NULL,
    detail text,
    from_status text NOT NULL,
    to_status text NOT NULL,
    cursor_before_tx xid8 NOT NULL,
    cursor_before_id bigint NOT NULL,
    cursor_after_tx xid8 NOT NULL,
    cursor_after_id bigint NOT NULL,
    changed_by text NOT NULL,
    reason text
);

--
-- Name: shard_changes_id_seq; Type: SEQUENCE; Schema: highwater; Owner: -
--

ALTER TABLE highwater.shard_changes ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME highwater.shard_changes_id_seq
    START WITH N
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: sleepers; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.sleepers (
    instance_id text NOT NULL,
    asleep_until timestamp with time zone NOT NULL
);

--
-- Name: stream_versions; Type: TABLE; Schema: highwater; Owner: -
--

CREATE TABLE highwater.stream_versions (
    stream_type text NOT NULL,
    stream_id text NOT NULL,
    version bigint NOT NULL,
    tx_id xid8 NOT NULL,
    CONSTRAINT stream_versions_version_check CHECK ((version > 0))
);

--
-- Name: events_p3; Type: TABLE ATTACH; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.events ATTACH PARTITION highwater.events_p3 FOR VALUES FROM ('bound_3') TO ('bound_4');

--
-- Name: events_p2; Type: TABLE ATTACH; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.events ATTACH PARTITION highwater.events_p2 FOR VALUES FROM ('bound_2') TO ('bound_3');

--
-- Name: events_legacy; Type: TABLE ATTACH; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.events ATTACH PARTITION highwater.events_legacy FOR VALUES FROM ('bound_1') TO ('bound_2');

--
-- Name: events_tail; Type: TABLE ATTACH; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.events ATTACH PARTITION highwater.events_tail FOR VALUES FROM ('bound_4') TO (MAXVALUE);

--
-- Name: consumer_flow consumer_flow_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.consumer_flow
    ADD CONSTRAINT consumer_flow_pkey PRIMARY KEY (consumer);

--
-- Name: consumer_shards consumer_shards_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.consumer_shards
    ADD CONSTRAINT consumer_shards_pkey PRIMARY KEY (consumer, instance_id);

--
-- Name: consumers consumers_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.consumers
    ADD CONSTRAINT consumers_pkey PRIMARY KEY (name);

--
-- Name: dead_letters dead_letters_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.dead_letters
    ADD CONSTRAINT dead_letters_pkey PRIMARY KEY (consumer, instance_id, event_id);

--
-- Name: dispatchers dispatchers_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.dispatchers
    ADD CONSTRAINT dispatchers_pkey PRIMARY KEY (instance_id);

--
-- Name: event_partitioning event_partitioning_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.event_partitioning
    ADD CONSTRAINT event_partitioning_pkey PRIMARY KEY (singleton);

--
-- Name: event_partitions event_partitions_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.event_partitions
    ADD CONSTRAINT event_partitions_pkey PRIMARY KEY (name);

--
-- Name: event_type_aliases event_type_aliases_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.event_type_aliases
    ADD CONSTRAINT event_type_aliases_pkey PRIMARY KEY (alias);

--
-- Name: event_type_versions event_type_versions_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.event_type_versions
    ADD CONSTRAINT event_type_versions_pkey PRIMARY KEY (event_type, version);

--
-- Name: event_types event_types_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.event_types
    ADD CONSTRAINT event_types_pkey PRIMARY KEY (event_type);

--
-- Name: pruned pruned_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.pruned
    ADD CONSTRAINT pruned_pkey PRIMARY KEY (event_type);

--
-- Name: replays replays_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.replays
    ADD CONSTRAINT replays_pkey PRIMARY KEY (request_id, instance_id, event_id);

--
-- Name: schema_version schema_version_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.schema_version
    ADD CONSTRAINT schema_version_pkey PRIMARY KEY (singleton);

--
-- Name: shard_changes shard_changes_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.shard_changes
    ADD CONSTRAINT shard_changes_pkey PRIMARY KEY (id);

--
-- Name: sleepers sleepers_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.sleepers
    ADD CONSTRAINT sleepers_pkey PRIMARY KEY (instance_id);

--
-- Name: stream_versions stream_versions_pkey; Type: CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.stream_versions
    ADD CONSTRAINT stream_versions_pkey PRIMARY KEY (stream_type, stream_id);

--
-- Name: consumer_shards_instance; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX consumer_shards_instance ON highwater.consumer_shards USING btree (instance_id);

--
-- Name: dead_letters_blocked_by; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX dead_letters_blocked_by ON highwater.dead_letters USING btree (consumer, instance_id, blocked_by) WHERE (blocked_by IS NOT NULL);

--
-- Name: dead_letters_redrive_pending; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX dead_letters_redrive_pending ON highwater.dead_letters USING btree (consumer, redrive_instance, redrive_at) WHERE (redrive_at IS NOT NULL);

--
-- Name: dispatchers_group; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX dispatchers_group ON highwater.dispatchers USING btree (consumer_group, heartbeat_at);

--
-- Name: event_type_aliases_event_type; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX event_type_aliases_event_type ON highwater.event_type_aliases USING btree (event_type);

--
-- Name: events_created_at; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_created_at ON ONLY highwater.events USING btree (created_at);

--
-- Name: events_p3_created_at_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p3_created_at_idx ON highwater.events_p3 USING btree (created_at);

--
-- Name: events_type_tx_id_id; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_type_tx_id_id ON ONLY highwater.events USING btree (event_type, tx_id, id);

--
-- Name: events_p3_event_type_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p3_event_type_tx_id_id_idx ON highwater.events_p3 USING btree (event_type, tx_id, id);

--
-- Name: events_id; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_id ON ONLY highwater.events USING btree (id);

--
-- Name: events_p3_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p3_id_idx ON highwater.events_p3 USING btree (id);

--
-- Name: events_stream; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_stream ON ONLY highwater.events USING btree (stream_type, stream_id, tx_id, id);

--
-- Name: events_p3_stream_type_stream_id_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p3_stream_type_stream_id_tx_id_id_idx ON highwater.events_p3 USING btree (stream_type, stream_id, tx_id, id);

--
-- Name: events_tx_id_id; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_tx_id_id ON ONLY highwater.events USING btree (tx_id, id);

--
-- Name: events_p3_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p3_tx_id_id_idx ON highwater.events_p3 USING btree (tx_id, id);

--
-- Name: events_p2_created_at_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p2_created_at_idx ON highwater.events_p2 USING btree (created_at);

--
-- Name: events_p2_event_type_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p2_event_type_tx_id_id_idx ON highwater.events_p2 USING btree (event_type, tx_id, id);

--
-- Name: events_p2_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p2_id_idx ON highwater.events_p2 USING btree (id);

--
-- Name: events_p2_stream_type_stream_id_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p2_stream_type_stream_id_tx_id_id_idx ON highwater.events_p2 USING btree (stream_type, stream_id, tx_id, id);

--
-- Name: events_p2_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_p2_tx_id_id_idx ON highwater.events_p2 USING btree (tx_id, id);

--
-- Name: events_legacy_created_at; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_legacy_created_at ON highwater.events_legacy USING btree (created_at);

--
-- Name: events_legacy_event_type_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_legacy_event_type_tx_id_id_idx ON highwater.events_legacy USING btree (event_type, tx_id, id);

--
-- Name: events_legacy_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_legacy_id_idx ON highwater.events_legacy USING btree (id);

--
-- Name: events_legacy_stream_type_stream_id_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_legacy_stream_type_stream_id_tx_id_id_idx ON highwater.events_legacy USING btree (stream_type, stream_id, tx_id, id);

--
-- Name: events_legacy_tx_id_id; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_legacy_tx_id_id ON highwater.events_legacy USING btree (tx_id, id);

--
-- Name: events_tail_created_at_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_tail_created_at_idx ON highwater.events_tail USING btree (created_at);

--
-- Name: events_tail_event_type_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_tail_event_type_tx_id_id_idx ON highwater.events_tail USING btree (event_type, tx_id, id);

--
-- Name: events_tail_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_tail_id_idx ON highwater.events_tail USING btree (id);

--
-- Name: events_tail_stream_type_stream_id_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_tail_stream_type_stream_id_tx_id_id_idx ON highwater.events_tail USING btree (stream_type, stream_id, tx_id, id);

--
-- Name: events_tail_tx_id_id_idx; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX events_tail_tx_id_id_idx ON highwater.events_tail USING btree (tx_id, id);

--
-- Name: replays_pending; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX replays_pending ON highwater.replays USING btree (consumer, instance_id, request_id, seq) WHERE (due_at IS NOT NULL);

--
-- Name: shard_changes_consumer; Type: INDEX; Schema: highwater; Owner: -
--

CREATE INDEX shard_changes_consumer ON highwater.shard_changes USING btree (consumer, id);

--
-- Name: events_p3_created_at_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_created_at ATTACH PARTITION highwater.events_p3_created_at_idx;

--
-- Name: events_p3_event_type_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_type_tx_id_id ATTACH PARTITION highwater.events_p3_event_type_tx_id_id_idx;

--
-- Name: events_p3_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_id ATTACH PARTITION highwater.events_p3_id_idx;

--
-- Name: events_p3_stream_type_stream_id_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_stream ATTACH PARTITION highwater.events_p3_stream_type_stream_id_tx_id_id_idx;

--
-- Name: events_p3_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_tx_id_id ATTACH PARTITION highwater.events_p3_tx_id_id_idx;

--
-- Name: events_p2_created_at_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_created_at ATTACH PARTITION highwater.events_p2_created_at_idx;

--
-- Name: events_p2_event_type_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_type_tx_id_id ATTACH PARTITION highwater.events_p2_event_type_tx_id_id_idx;

--
-- Name: events_p2_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_id ATTACH PARTITION highwater.events_p2_id_idx;

--
-- Name: events_p2_stream_type_stream_id_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_stream ATTACH PARTITION highwater.events_p2_stream_type_stream_id_tx_id_id_idx;

--
-- Name: events_p2_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_tx_id_id ATTACH PARTITION highwater.events_p2_tx_id_id_idx;

--
-- Name: events_legacy_created_at; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_created_at ATTACH PARTITION highwater.events_legacy_created_at;

--
-- Name: events_legacy_event_type_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_type_tx_id_id ATTACH PARTITION highwater.events_legacy_event_type_tx_id_id_idx;

--
-- Name: events_legacy_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_id ATTACH PARTITION highwater.events_legacy_id_idx;

--
-- Name: events_legacy_stream_type_stream_id_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_stream ATTACH PARTITION highwater.events_legacy_stream_type_stream_id_tx_id_id_idx;

--
-- Name: events_legacy_tx_id_id; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_tx_id_id ATTACH PARTITION highwater.events_legacy_tx_id_id;

--
-- Name: events_tail_created_at_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_created_at ATTACH PARTITION highwater.events_tail_created_at_idx;

--
-- Name: events_tail_event_type_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_type_tx_id_id ATTACH PARTITION highwater.events_tail_event_type_tx_id_id_idx;

--
-- Name: events_tail_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_id ATTACH PARTITION highwater.events_tail_id_idx;

--
-- Name: events_tail_stream_type_stream_id_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_stream ATTACH PARTITION highwater.events_tail_stream_type_stream_id_tx_id_id_idx;

--
-- Name: events_tail_tx_id_id_idx; Type: INDEX ATTACH; Schema: highwater; Owner: -
--

ALTER INDEX highwater.events_tx_id_id ATTACH PARTITION highwater.events_tail_tx_id_id_idx;

--
-- Name: consumer_shards consumer_shards_notify_applied_insert; Type: TRIGGER; Schema: highwater; Owner: -
--

CREATE TRIGGER consumer_shards_notify_applied_insert AFTER INSERT ON highwater.consumer_shards FOR EACH ROW EXECUTE FUNCTION highwater.notify_applied();

--
-- Name: consumer_shards consumer_shards_notify_applied_update; Type: TRIGGER; Schema: highwater; Owner: -
--

CREATE TRIGGER consumer_shards_notify_applied_update AFTER UPDATE OF cursor_tx, cursor_id ON highwater.consumer_shards FOR EACH ROW WHEN (((old.cursor_tx IS DISTINCT FROM new.cursor_tx) OR (old.cursor_id IS DISTINCT FROM new.cursor_id))) EXECUTE FUNCTION highwater.notify_applied();

--
-- Name: dead_letters dead_letters_parked_again; Type: TRIGGER; Schema: highwater; Owner: -
--

CREATE TRIGGER dead_letters_parked_again BEFORE INSERT ON highwater.dead_letters FOR EACH ROW EXECUTE FUNCTION highwater.dead_letter_parked_again();

--
-- Name: event_type_versions event_type_versions_upcasts; Type: TRIGGER; Schema: highwater; Owner: -
--

CREATE TRIGGER event_type_versions_upcasts AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON highwater.event_type_versions FOR EACH STATEMENT EXECUTE FUNCTION highwater.upcasts_changed();

--
-- Name: events events_advance_stream_version; Type: TRIGGER; Schema: highwater; Owner: -
--

CREATE TRIGGER events_advance_stream_version BEFORE INSERT ON highwater.events FOR EACH ROW WHEN ((new.stream_version IS NOT NULL)) EXECUTE FUNCTION highwater.advance_stream_version();

--
-- Name: events events_notify; Type: TRIGGER; Schema: highwater; Owner: -
--

CREATE TRIGGER events_notify AFTER INSERT ON highwater.events FOR EACH STATEMENT EXECUTE FUNCTION highwater.notify_events();

--
-- Name: events events_record_pruned; Type: TRIGGER; Schema: highwater; Owner: -
--

CREATE TRIGGER events_record_pruned AFTER DELETE ON highwater.events REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION highwater.record_pruned();

--
-- Name: events events_remember_raised_tx_id; Type: TRIGGER; Schema: highwater; Owner: -
--

CREATE TRIGGER events_remember_raised_tx_id AFTER INSERT ON highwater.events FOR EACH ROW WHEN ((new.tx_id > pg_current_xact_id())) EXECUTE FUNCTION highwater.remember_raised_tx_id();

--
-- Name: consumer_flow consumer_flow_consumer_fkey; Type: FK CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.consumer_flow
    ADD CONSTRAINT consumer_flow_consumer_fkey FOREIGN KEY (consumer) REFERENCES highwater.consumers(name) ON DELETE CASCADE;

--
-- Name: consumer_shards consumer_shards_consumer_fkey; Type: FK CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.consumer_shards
    ADD CONSTRAINT consumer_shards_consumer_fkey FOREIGN KEY (consumer) REFERENCES highwater.consumers(name) ON DELETE CASCADE;

--
-- Name: event_type_aliases event_type_aliases_alias_fkey; Type: FK CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.event_type_aliases
    ADD CONSTRAINT event_type_aliases_alias_fkey FOREIGN KEY (alias) REFERENCES highwater.event_types(event_type);

--
-- Name: event_type_aliases event_type_aliases_event_type_fkey; Type: FK CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.event_type_aliases
    ADD CONSTRAINT event_type_aliases_event_type_fkey FOREIGN KEY (event_type) REFERENCES highwater.event_types(event_type);

--
-- Name: event_type_versions event_type_versions_event_type_fkey; Type: FK CONSTRAINT; Schema: highwater; Owner: -
--

ALTER TABLE ONLY highwater.event_type_versions
    ADD CONSTRAINT event_type_versions_event_type_fkey FOREIGN KEY (event_type) REFERENCES highwater.event_types(event_type);

--
-- Name: FUNCTION append(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb, p_tenant_id text, p_expected_version bigint); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.append(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb, p_tenant_id text, p_expected_version bigint) FROM PUBLIC;

--
-- Name: FUNCTION append(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb, p_tenant_id text, p_expected_version bigint, p_schema_version integer); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.append(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb, p_tenant_id text, p_expected_version bigint, p_schema_version integer) FROM PUBLIC;

--
-- Name: FUNCTION append_limits(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.append_limits(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb) FROM PUBLIC;

--
-- Name: FUNCTION append_position(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb, p_tenant_id text, p_expected_version bigint, OUT id bigint, OUT tx_id xid8, OUT token xid8); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.append_position(p_stream_type text, p_stream_id text, p_event_type text, p_payload jsonb, p_metadata jsonb, p_tenant_id text, p_expected_version bigint, OUT id bigint, OUT tx_id xid8, OUT token xid8) FROM PUBLIC;

--
-- Name: FUNCTION applied(p_consumer text, p_token xid8, p_instance text); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.applied(p_consumer text, p_token xid8, p_instance text) FROM PUBLIC;

--
-- Name: FUNCTION applied_bound(p_consumer text, p_instance text); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.applied_bound(p_consumer text, p_instance text) FROM PUBLIC;

--
-- Name: FUNCTION create_event_partitions(); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.create_event_partitions() FROM PUBLIC;

--
-- Name: FUNCTION repartition(p_consumer text, p_refuse_dead boolean); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.repartition(p_consumer text, p_refuse_dead boolean) FROM PUBLIC;

--
-- Name: FUNCTION trace_context(p_meta jsonb, p_traceparent text, p_tracestate text); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.trace_context(p_meta jsonb, p_traceparent text, p_tracestate text) FROM PUBLIC;

--
-- Name: FUNCTION unknown_event_type(p_event_type text); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.unknown_event_type(p_event_type text) FROM PUBLIC;

--
-- Name: FUNCTION upcast_generate(); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.upcast_generate() FROM PUBLIC;

--
-- Name: FUNCTION upcasts_changed(); Type: ACL; Schema: highwater; Owner: -
--

REVOKE ALL ON FUNCTION highwater.upcasts_changed() FROM PUBLIC;

--
-- Name: TABLE schema_version; Type: ACL; Schema: highwater; Owner: -
--

GRANT SELECT ON TABLE highwater.schema_version TO PUBLIC;

--
-- Name: TABLE sleepers; Type: ACL; Schema: highwater; Owner: -
--

GRANT SELECT ON TABLE highwater.sleepers TO PUBLIC;

--
-- PostgreSQL database dump complete
--

