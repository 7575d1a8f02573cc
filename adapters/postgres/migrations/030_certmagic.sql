-- ACME state shared by every replica (certmagic.Storage): certificates,
-- private keys, account keys, challenge tokens for distributed solving,
-- keyed by certmagic's slash-separated keys.
CREATE TABLE certmagic_data (
	key      text PRIMARY KEY,
	value    bytea NOT NULL,
	modified timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- certmagic's Locker: one row per held lock. A holder renews expires_at
-- while it works; a crashed holder's lock is taken over once it expired.
-- Times come from the database's clock only.
CREATE TABLE certmagic_locks (
	name       text PRIMARY KEY,
	holder     text NOT NULL,
	expires_at timestamptz NOT NULL
);
