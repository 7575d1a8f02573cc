-- The lease coordinator (DESIGN.md section 5). One row per resource that was
-- ever leased; the row stays after release or expiry, so highest_token is the
-- highest token ever issued for the resource.
CREATE TABLE resource_fence (
    resource_id      text PRIMARY KEY,
    highest_token    bigint NOT NULL CHECK (highest_token > 0),
    owner_id         text NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- Tokens come from one sequence, drawn inside the takeover's statement.
-- A sequence is not rolled back: an aborted takeover leaves a gap and the
-- gap grants nothing (I5). NO CYCLE: running out is an error, never a
-- wrap-around to small tokens.
CREATE SEQUENCE resource_fence_token_seq AS bigint MINVALUE 1 NO CYCLE;

-- I5/I7: no script or bug may lower a resource's highest token, rename a
-- record or remove one (the row is the resource's issuance history, which
-- token verification reads).
CREATE FUNCTION resource_fence_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'fencegate: lease record of % may not be deleted', OLD.resource_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION 'fencegate: the resource_fence table may not be truncated'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.resource_id <> OLD.resource_id THEN
        RAISE EXCEPTION 'fencegate: lease record of % may not be renamed', OLD.resource_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.highest_token < OLD.highest_token THEN
        RAISE EXCEPTION 'fencegate: highest token of % may not decrease (% to %)', OLD.resource_id, OLD.highest_token, NEW.highest_token
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

-- The WHEN clause keeps the function off the hot path: acquire, renew and
-- release update every time, and only a violation needs PL/pgSQL.
CREATE TRIGGER resource_fence_guard_update BEFORE UPDATE ON resource_fence
    FOR EACH ROW WHEN (NEW.highest_token < OLD.highest_token OR NEW.resource_id <> OLD.resource_id)
    EXECUTE FUNCTION resource_fence_guard();
CREATE TRIGGER resource_fence_guard_delete BEFORE DELETE ON resource_fence
    FOR EACH ROW EXECUTE FUNCTION resource_fence_guard();
CREATE TRIGGER resource_fence_guard_truncate BEFORE TRUNCATE ON resource_fence
    FOR EACH STATEMENT EXECUTE FUNCTION resource_fence_guard();
