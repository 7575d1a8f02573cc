-- A store that went back (an asynchronous standby promoted, an older backup
-- restored) must not be served as if it were current (docs/recovery.md).
-- fencegate_meta gains, written by the gateways' store guard (guard.go):
--   'timeline'    the PostgreSQL timeline the store was last served on;
--   'replication' "<timeline> sync" or "<timeline> async": whether that
--                 primary named a synchronous standby when last looked at;
--   'regressed'   set by a process that saw the store further ahead than
--                 it now is; every process refuses while it is there;
--   'token_floor' tokens below it were issued before the last recovery
--                 and are refused everywhere.
-- Each run of `fencegate fence recover` leaves one row here (the audit).
CREATE TABLE fencegate_recovery (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                timestamptz NOT NULL DEFAULT clock_timestamp(),
    timeline          bigint NOT NULL,
    previous_timeline text NOT NULL DEFAULT '',
    cause             text NOT NULL,
    sequence_before   bigint NOT NULL,
    token_floor       bigint NOT NULL,
    fences_raised     bigint NOT NULL,
    leases_ended      bigint NOT NULL,
    by_whom           text NOT NULL DEFAULT ''
);

-- Recorded with the schema, so that any copy of the schema (a standby, a
-- backup) carries the timeline it was served on: a copy without it would
-- look like a new store to the guard. A migration runs on a primary.
INSERT INTO fencegate_meta (key, value)
SELECT 'timeline', (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint)::text
ON CONFLICT (key) DO NOTHING;
INSERT INTO fencegate_meta (key, value)
SELECT 'replication', (SELECT value FROM fencegate_meta WHERE key = 'timeline')
       || CASE WHEN current_setting('synchronous_standby_names') <> '' THEN ' sync' ELSE ' async' END
ON CONFLICT (key) DO NOTHING;
