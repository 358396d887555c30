-- A shard of a Shared consumer (partitioned or not), as opposed to a PerInstance shard (as
-- highwater_crds::is_shared_instance). SQL tests shard names with this, never with a literal.
-- Since 20261201000040_partitioned_consumers.sql.
CREATE OR REPLACE FUNCTION highwater.is_shared_shard(p_instance text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_instance = '__shared__' OR starts_with(p_instance, '__shared__/');
