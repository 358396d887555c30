-- Wake-up hint for dispatchers (NOTIFY highwater_events), once per INSERT statement on
-- highwater.events (trigger_events_notify.sql); they poll as well, so a lost notification only
-- costs latency.
--
-- Writers notify only while some dispatcher sleeps waiting for one
-- (20261202000010_notify_sleepers.sql). A transaction that sent a notification takes one
-- cluster-wide lock at commit and keeps it until its commit is done, so notifying commits queue
-- behind each other. With 8 writers on 2 cores the queue capped appends at about 3,500/s and
-- held the fence back (a writer queued there still has its transaction open); without the
-- notification the same writers reach 8,400/s. A dispatcher that is draining a steady stream does
-- not need the notification: it reads the head every few milliseconds anyway. So each dispatcher
-- says in highwater.sleepers when it sleeps (a row whose lease runs), and this notifies only then.
--
-- No event waits on this: a dispatcher marks itself asleep, then keeps reading the head until
-- every transaction that was running when the mark committed has ended (its fence passes the
-- xmax of the first snapshot taken after the mark). A writer that read "nobody sleeps" had its
-- transaction id before the mark committed, so that read sees its events; a writer that reads
-- later sees the mark. Only READ COMMITTED writers take a new snapshot for the trigger's query;
-- the others see the table as of their transaction's start, so they always notify. A lease that
-- ran out (a dispatcher killed while asleep, or one that could not renew) counts as awake; the
-- dispatcher's own safety poll is the net for that. See docs/delivery.md, "Wake-ups and polling".
--
-- Every name qualified: the function runs inside highwater.append with the owner's rights and
-- the caller's search path (append.sql, point 1; since 20261201000030_append_cost.sql), so that
-- a function of the same name in a schema of the caller's cannot run with the owner's rights.
-- History: 20261130000001_schema.sql (always notify), 20261201000030 (qualified names),
-- 20261202000010 (only while a dispatcher sleeps).
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
