-- The instance_id of partition p_index of a Shared consumer split in p_count: `__shared__` for
-- one, `__shared__/p<i>of<N>` otherwise (as highwater_crds::partition_instance). With
-- highwater.is_shared_shard, the only SQL that spells the sentinel.
-- Since 20261201000040_partitioned_consumers.sql.
CREATE OR REPLACE FUNCTION highwater.partition_instance(p_index integer, p_count integer)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN p_count <= 1 THEN '__shared__' ELSE format('__shared__/p%sof%s', p_index, p_count) END;
