-- The fence and head part of a shard's batch read (shards.rs, HEAD_LATERAL and the fence CTE),
-- alone, for pgbench (docs/bench/history.md, session of 2026-12-02, third):
--   pgbench -n -M prepared -t 5000 -f docs/bench/fence_head.sql DB   # against: a file with SELECT 1;
WITH s AS MATERIALIZED (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS fence,
                               pg_snapshot_xmax(pg_current_snapshot()) AS next)
SELECT s.next, h.tx_id, h.id
  FROM s
  LEFT JOIN LATERAL (SELECT tx_id, id FROM highwater.events WHERE tx_id < s.fence
                      ORDER BY tx_id DESC, id DESC LIMIT 1) h ON true;
