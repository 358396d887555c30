-- Writers send NOTIFY highwater_events only while some dispatcher sleeps waiting for one.
--
-- A transaction that sent a notification takes one cluster-wide lock at commit and keeps it until
-- its commit is done, so notifying commits queue behind each other. With 8 writers on 2 cores the
-- queue capped appends at about 3,500/s and held the fence back (a writer queued there still has
-- its transaction open); without the notification the same writers reach 8,400/s. A dispatcher
-- that is draining a steady stream does not need the notification: it reads the head every few
-- milliseconds anyway. So each dispatcher says here when it sleeps (a row whose lease runs), and
-- the trigger notifies only then.
--
-- No event waits on this: a dispatcher marks itself asleep, then keeps reading the head until
-- every transaction that was running when the mark committed has ended (its fence passes the
-- xmax of the first snapshot taken after the mark). A writer that read "nobody sleeps" had its
-- transaction id before the mark committed, so that read sees its events; a writer that reads
-- later sees the mark. Only READ COMMITTED writers take a new snapshot for the trigger's query;
-- the others see the table as of their transaction's start, so they always notify. A lease that
-- ran out (a dispatcher killed while asleep, or one that could not renew) counts as awake; the
-- dispatcher's own safety poll is the net for that. See docs/delivery.md, "Wake-ups and polling".
CREATE TABLE highwater.sleepers (
    instance_id text PRIMARY KEY,
    asleep_until timestamptz NOT NULL
);

-- Whoever inserts into highwater.events runs the trigger with its own rights.
GRANT SELECT ON highwater.sleepers TO PUBLIC;

-- Every name qualified: the function runs inside highwater.append with the owner's rights and
-- the caller's search path (see 20261201000030_append_cost.sql).
CREATE OR REPLACE FUNCTION highwater.notify_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
       OR EXISTS (SELECT FROM highwater.sleepers
                   WHERE asleep_until OPERATOR(pg_catalog.>) pg_catalog.now()) THEN
        PERFORM pg_catalog.pg_notify('highwater_events', '');
    END IF;
    RETURN NULL;
END
$$;
