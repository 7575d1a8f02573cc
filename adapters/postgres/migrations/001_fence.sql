-- The gateway's fence: per resource the highest token accepted (or issued,
-- with fence on issuance) and whether older writes have drained.
CREATE TABLE fence (
    resource    text PRIMARY KEY,
    highest     bigint NOT NULL CHECK (highest > 0),
    ready       boolean NOT NULL DEFAULT true,
    owner       text NOT NULL DEFAULT '',
    etag        text NOT NULL DEFAULT '',
    etag_token  bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Invariant I7: no script, admin call or replica bug may lower a highest
-- token, rename a fence or remove one (a removed fence would start over at 0).
CREATE FUNCTION fence_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
    IF NEW.highest < OLD.highest THEN
        RAISE EXCEPTION 'fencegate: highest token of % may not decrease (% to %)', OLD.resource, OLD.highest, NEW.highest
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER fence_guard_row BEFORE UPDATE OR DELETE ON fence
    FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER fence_guard_truncate BEFORE TRUNCATE ON fence
    FOR EACH STATEMENT EXECUTE FUNCTION fence_guard();
