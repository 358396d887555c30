-- The partition of a stream among n (docs/consumers.md, "Partitions"). Stable across versions
-- and processes (hashtextextended with seed 0 is part of PostgreSQL's on-disk hash partitioning
-- contract); the unit separator keeps ('a', 'b/c') and ('a/b', 'c') apart. Computed when read
-- rather than stored: no table rewrite on upgrade and no cost on append; a partition's read
-- filters the events of the others (it reads N× the rows of its batch, docs/benchmarks.md
-- "Partitioned consumers"). Since 20261201000040_partitioned_consumers.sql.
CREATE OR REPLACE FUNCTION highwater.stream_partition(p_stream_type text, p_stream_id text, p_partitions integer)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ((hashtextextended(p_stream_type || E'\x1f' || p_stream_id, 0) & 9223372036854775807)
        % greatest(p_partitions, 1))::integer;
