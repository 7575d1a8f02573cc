-- Shared fence mode: one row per marker session of a gateway replica (a
-- long-lived connection that holds the in-flight markers as shared advisory
-- locks). A drain that finds a session gone (its liveness lock no longer
-- held) records when it noticed and waits until forward_timeout has passed
-- since then, so a marker that vanished with its connection (replica killed,
-- link cut, database restart) cannot end a drain while the write it
-- protected may still be on its way upstream. See docs/design.md §4.
CREATE SEQUENCE fence_session_id_seq AS integer MINVALUE 1 MAXVALUE 2147483647 CYCLE;

CREATE TABLE fence_session (
    id               integer PRIMARY KEY,
    replica          text NOT NULL DEFAULT '',
    backend_pid      integer NOT NULL DEFAULT 0,
    forward_timeout  interval NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    dead_at          timestamptz
);
