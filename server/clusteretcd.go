package server

import (
	"context"

	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"
)

// replicaStore returns where the replicas of fence mode shared report
// themselves for the console's cluster view; nil in local mode.
func (s *Server) replicaStore(cfg *config.Config) replicaStore {
	if cfg.Fence.Mode != "shared" {
		return nil
	}
	switch st := s.store.(type) {
	case *postgres.Store:
		return st
	case *etcd.Store:
		return etcdReplicas{st}
	}
	return nil
}

// etcdReplicas reads etcd's report rows as PostgreSQL's.
type etcdReplicas struct{ *etcd.Store }

func (e etcdReplicas) Replicas(ctx context.Context) ([]postgres.ReplicaRow, error) {
	rows, err := e.Store.Replicas(ctx)
	out := make([]postgres.ReplicaRow, len(rows))
	for i, r := range rows {
		out[i] = postgres.ReplicaRow(r)
	}
	return out, err
}
