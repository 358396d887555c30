-- Creates the partitions missing between the highest one and `ahead` widths above the next
-- transaction id; returns how many it created. Owned by whoever runs the migrations and run with
-- their rights, so a dispatcher role that only reads and writes the tables may call it.
--
-- The tail partition [top, MAXVALUE) is re-cut each time: detached (ACCESS EXCLUSIVE on
-- highwater.events for the few milliseconds of this transaction, waiting at most 1 s for
-- transactions using the table, else this call fails and the next one retries), the new ranges
-- attached, the tail attached again above them. If rows landed in the tail (nobody created
-- partitions in time), it becomes an ordinary range up to its newest tx_id, droppable like any.
-- Since 20261201000020_partitioned_events.sql, which makes the first partitions itself (the
-- same loop, inlined: the migration runs before the definitions are applied).
CREATE OR REPLACE FUNCTION highwater.create_event_partitions() RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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

REVOKE ALL ON FUNCTION highwater.create_event_partitions() FROM PUBLIC;
