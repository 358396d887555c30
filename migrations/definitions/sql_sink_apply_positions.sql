-- Applies a batch through the consumer's statement, prepared in this session by
-- `highwater.sql_sink_prepare` (sql_sink_prepare.sql). The batch is its events' positions in
-- delivery order: event i is (p_tx_ids[i], p_ids[i]). `failed` is NULL when every event was
-- applied; otherwise it is the 0-based index of the first event that failed, nothing of the
-- batch is applied, and `message` says why.
--
-- The pairs, not the ids alone (`highwater.sql_sink_apply`, which this replaces for the
-- dispatcher since 0.4.0, issue 44): a sparse batch (a consumer of a few of many types) is read
-- by looking each event up, and only an equality on both columns of the (tx_id, id) index makes
-- each lookup one index probe whatever the plan; with the ids alone the generic plan scanned the
-- batch's whole transaction range for every id once transactions hold several events. The
-- batch's range is its first and last transaction.
CREATE OR REPLACE FUNCTION highwater.sql_sink_apply_positions(
    p_form      text,
    p_statement text,
    p_role      text,
    p_single    boolean,
    p_tx_ids    xid8[],
    p_ids       bigint[],
    OUT failed   integer,
    OUT deferred boolean,
    OUT message  text
)
LANGUAGE plpgsql
AS $fn$
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
$fn$;
