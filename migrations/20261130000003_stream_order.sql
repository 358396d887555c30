-- Keeps each stream's versions in delivery order.
--
-- Readers deliver in (tx_id, id) order, and tx_id is the writer's transaction id, assigned when
-- the transaction first writes, not when it commits. A transaction that took its id early (it
-- wrote business rows first) and appends version N+1 after a later-numbered transaction committed
-- version N would give N+1 the smaller tx_id: delivered before N. So a versioned event takes the
-- larger of its own transaction id and its predecessor's. That never lets a reader pass it early:
-- its tx_id is still at least its own running transaction's id, which holds the fence below it
-- until it commits; and the predecessor, committed and visible to this transaction, has the
-- smaller id, so (tx_id, id) puts version N first.
CREATE FUNCTION highwater.order_after_previous_version() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_previous xid8;
BEGIN
    SELECT e.tx_id INTO v_previous
      FROM highwater.events e
     WHERE e.stream_type = NEW.stream_type AND e.stream_id = NEW.stream_id
       AND e.stream_version = NEW.stream_version - 1;
    -- No predecessor visible (pruned, or an expected version that skips numbers): own id kept.
    IF v_previous > NEW.tx_id THEN
        NEW.tx_id := v_previous;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER events_order_after_previous_version
    BEFORE INSERT ON highwater.events
    FOR EACH ROW WHEN (NEW.stream_version IS NOT NULL AND NEW.stream_version > 1)
    EXECUTE FUNCTION highwater.order_after_previous_version();
