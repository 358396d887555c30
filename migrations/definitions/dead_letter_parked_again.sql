-- A dead letter parked again after its redrive (a `rewind` over the event, which then failed
-- again, or an operator's skip of it): the park statements insert with ON CONFLICT DO NOTHING
-- (unchanged since 0.1.0, so that they run on a schema without the redrive columns), which would
-- leave the row marked redriven with its old error, and `consumer redrive` would refuse it as no
-- longer a dead letter. Before the insert, such a row becomes a dead letter again with the new
-- attempts and error; the insert then meets the conflict and does nothing. A row whose redrive
-- is pending is left alone (its delivery decides). Since 20261204000000_redrive.sql.
CREATE OR REPLACE FUNCTION highwater.dead_letter_parked_again() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE highwater.dead_letters d
       SET attempts = NEW.attempts, error = NEW.error, redriven_at = NULL
     WHERE d.consumer = NEW.consumer AND d.instance_id = NEW.instance_id AND d.event_id = NEW.event_id
       AND d.redriven_at IS NOT NULL AND d.redrive_at IS NULL;
    RETURN NEW;
END
$$;
