-- Hierarchical keys in fence mode shared (docs/design.md §4, "Hierarchical
-- keys in shared mode"): per collection the level of the member writes
-- admitted through it. below never decreases; ready is false from a raise
-- of below until the writes of the collection's own key that were in
-- flight at the raise have ended; known is set once a collection write
-- read every member row (rows written before the collection was checked
-- hierarchically).
CREATE TABLE fence_below (
    resource text PRIMARY KEY,
    below    bigint NOT NULL DEFAULT 0,
    ready    boolean NOT NULL DEFAULT true,
    known    boolean NOT NULL DEFAULT false
);

-- The one decrease let through is a reset's (migration 050): the reset of
-- a member recomputes the levels of the collections above it from their
-- fence rows.
CREATE FUNCTION fence_below_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.resource <> OLD.resource
       OR NEW.below < OLD.below AND coalesce(current_setting('fencegate.fence_reset', true), '') = '' THEN
        RAISE EXCEPTION 'fencegate: the below level of % may not be lowered or removed', OLD.resource
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER fence_below_guard_row BEFORE UPDATE OR DELETE ON fence_below
    FOR EACH ROW EXECUTE FUNCTION fence_below_guard();

-- fence_wait_markers waits, key after key, until no session holds a marker
-- (shared advisory lock) on it: the EXCLUSIVE lock is taken and released at
-- once, so a collection's drain never holds more than one member's lock,
-- however large the collection. lock_timeout bounds each wait.
CREATE FUNCTION fence_wait_markers(keys bigint[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
    n integer := 0;
BEGIN
    FOREACH k IN ARRAY coalesce(keys, ARRAY[]::bigint[]) LOOP
        PERFORM pg_advisory_lock(k);
        PERFORM pg_advisory_unlock(k);
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;
