-- Applies a batch through the consumer's statement, prepared in this session by
-- `highwater.sql_sink_prepare` (sql_sink_prepare.sql). The batch is the events `p_ids`, whose
-- transaction ids lie in [p_lo, p_hi]; they are applied in (tx_id, id) order. `failed` is NULL
-- when every event was applied; otherwise it is the 0-based index of the first event that failed,
-- nothing of the batch is applied, and `message` says why.
-- Since 20261201000001_sql_sink_batch.sql. Since 0.4.0 the dispatcher calls
-- `highwater.sql_sink_apply_positions` instead, which names each event by its (tx_id, id) pair;
-- this one stays for a previous release's dispatchers during a rolling upgrade (expand/contract,
-- README.md): the generated code reads the pairs itself in one walk of [p_lo, p_hi]. A later
-- release drops it.
CREATE OR REPLACE FUNCTION highwater.sql_sink_apply(
    p_form      text,
    p_statement text,
    p_role      text,
    p_single    boolean,
    p_lo        xid8,
    p_hi        xid8,
    p_ids       bigint[],
    OUT failed   integer,
    OUT deferred boolean,
    OUT message  text
)
LANGUAGE plpgsql
AS $fn$
BEGIN
    EXECUTE format('SELECT * FROM pg_temp.%I($1, $2, $3, $4, $5, NULL)',
                   highwater.sql_sink_name(p_form, p_statement) || '_batch')
       INTO failed, deferred, message
      USING p_role, p_single, p_lo, p_hi, p_ids;
END
$fn$;
