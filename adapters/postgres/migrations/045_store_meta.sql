-- The store's identity: a random value drawn when the schema was created,
-- so that a gateway can tell its database from a new, empty one put in its
-- place (the store marker, docs/recovery.md). A restored backup keeps it.
CREATE TABLE fencegate_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO fencegate_meta (key, value)
VALUES ('id', md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text));
