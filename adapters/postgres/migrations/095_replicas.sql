-- The gateway replicas sharing this database and what each last reported
-- (the operator console's cluster view: every replica's in-flight writes
-- and recent refusals). A replica rewrites its row every few seconds and
-- deletes it when it stops; a row that is not rewritten is a replica that
-- is down. Nothing here takes part in fencing.
CREATE TABLE fencegate_replicas (
    id         text PRIMARY KEY,
    name       text NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    report     jsonb NOT NULL
);
