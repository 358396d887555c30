-- The writer's W3C Trace Context for an event's metadata (issue 48, part 1): `highwater.append`
-- calls it only when the caller gave one, so an append without trace context pays nothing.
--
-- Where the context comes from, in this order:
-- 1. the metadata itself (`traceparent`, `tracestate` keys): the explicit argument, no new
--    signature needed; the settings are then not read;
-- 2. the transaction-local settings `highwater.traceparent` / `highwater.tracestate`
--    (`SET LOCAL highwater.traceparent = '00-…-…-01'`), which an ORM or plain SQL sets once per
--    transaction and which a SQL sink sets per event for its statement (sql_sink_prepare.sql), so
--    what a projection appends stays in the trace of its cause.
--
-- The checks are those of the W3C Trace Context recommendation (level 1, section 3.2): version
-- two lowercase hex digits and not `ff`, trace id 32 and parent id 16 lowercase hex digits, none
-- all zeros, flags two hex digits; version 00 has exactly these four fields, a later version may
-- append fields after a `-`. `tracestate`: at most 512 characters of printable ASCII (3.3; its
-- list members are the vendors' business and are passed on as they are).
-- A malformed value never fails the append: the event is worth more than its trace. It is left
-- out with a NOTICE saying which and why (docs/observability.md, "Tracing"); a `tracestate`
-- without a valid `traceparent` means nothing and goes with it.
--
-- p_traceparent / p_tracestate are the settings' values (read by the caller, which reads each
-- setting once); NULL when the metadata holds the context.
CREATE OR REPLACE FUNCTION highwater.trace_context(p_meta jsonb, p_traceparent text, p_tracestate text)
RETURNS jsonb
LANGUAGE plpgsql
-- Called by the SECURITY DEFINER append as its owner; no SET clause (see append.sql): every name
-- below is qualified.
AS $$
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
$$;

REVOKE ALL ON FUNCTION highwater.trace_context(jsonb, text, text) FROM PUBLIC;
