-- `fencegate fence reset` (docs/design.md I7): the one path that lowers a
-- fence. The guard still refuses every decrease, except the one a reset
-- transaction announces with
--   set_config('fencegate.fence_reset', resource || E'\n' || new_highest, true)
-- (local to that transaction), after it checked under a lock on the lease
-- records that no token above new_highest was ever issued for the resource.
CREATE OR REPLACE FUNCTION fence_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'fencegate: fence of % may not be deleted', OLD.resource
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION 'fencegate: the fence table may not be truncated'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.resource <> OLD.resource THEN
        RAISE EXCEPTION 'fencegate: fence of % may not be renamed', OLD.resource
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.highest < OLD.highest
       AND coalesce(current_setting('fencegate.fence_reset', true), '') <> OLD.resource || E'\n' || NEW.highest::text THEN
        RAISE EXCEPTION 'fencegate: highest token of % may not decrease (% to %)', OLD.resource, OLD.highest, NEW.highest
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;
