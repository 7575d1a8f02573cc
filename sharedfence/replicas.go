package sharedfence

import "time"

// ReplicaRow is one replica's report as the console's cluster view reads
// it from the shared store: what the replica last reported (Report, its
// own JSON) and when, by the store's clock where it has one (PostgreSQL)
// or the replicas' own (etcd), with what time it is by that clock (Now),
// so that staleness is judged on one clock.
type ReplicaRow struct {
	ID, Name      string
	Started, Seen time.Time
	Now           time.Time
	Report        []byte
}

// ReplicaForget is how long the report of a replica that stopped
// reporting (it crashed, or lost the store) is kept and shown as down.
const ReplicaForget = 24 * time.Hour
