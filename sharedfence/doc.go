// Package sharedfence holds the parts of the shared-fence protocol
// (fence mode shared, docs/design.md §4) that do not depend on the store
// the replicas share: the decision of a hierarchical write on the rows
// read with its marker held (Decide), the wait for a lost replica's
// forward timeout (Pause), and a write's forward bound (Flight). Its
// backends, adapters/postgres and adapters/etcd, keep what is their
// store's own protocol: how a marker is held (an advisory lock, a key on
// the replica's lease), how a drain waits for markers (a lock wait, a
// Watch), how a replica found gone is recorded, and how the reads and
// raises are batched into the store's round trips.
package sharedfence
