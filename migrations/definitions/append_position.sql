-- highwater.append that also returns the event's position (tx_id, id) and the transaction's token
-- so far (which covers this event and every earlier one of the transaction; token.sql).
-- Since 20261201000010_read_your_writes.sql.
CREATE OR REPLACE FUNCTION highwater.append_position(
    p_stream_type      text,
    p_stream_id        text,
    p_event_type       text,
    p_payload          jsonb,
    p_metadata         jsonb DEFAULT NULL,
    p_tenant_id        text DEFAULT NULL,
    p_expected_version bigint DEFAULT NULL,
    OUT id             bigint,
    OUT tx_id          xid8,
    OUT token          xid8
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    id := highwater.append(p_stream_type, p_stream_id, p_event_type, p_payload, p_metadata,
                           p_tenant_id, p_expected_version);
    SELECT e.tx_id INTO tx_id FROM highwater.events e WHERE e.id = append_position.id;
    token := highwater.token();
END
$$;

REVOKE ALL ON FUNCTION highwater.append_position(text, text, text, jsonb, jsonb, text, bigint) FROM PUBLIC;
