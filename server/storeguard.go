package server

import (
	"time"

	"github.com/fencegate/fencegate/adapters/postgres"
)

// storeCheckEvery is how often the store guard looks at the database
// besides each new connection: it finds a regression another process
// recorded, a recovery, and changes of the primary's replication.
const storeCheckEvery = time.Second

// watchStore starts the PostgreSQL store guard, exports its state
// (fencegate_store_regressed) and logs what the primary's replication means
// for the fence.
func (s *Server) watchStore(st *postgres.Store) {
	g := st.Guard()
	s.tel.StoreRegressed(func() float64 {
		if g.Regressed() != "" {
			return 1
		}
		return 0
	})
	r := g.Replication()
	if r.Timeline > 0 {
		attrs := []any{"timeline", r.Timeline, "synchronous_standby_names", r.SynchronousStandbyNames,
			"sync_standbys", r.SyncStandbys, "standbys", r.Standbys, "meaning", r.Meaning()}
		if r.Synchronous() {
			s.log.Info("fence store replication", attrs...)
		} else {
			s.log.Warn("fence store replication is not synchronous", attrs...)
		}
	}
	st.Watch(storeCheckEvery)
}
