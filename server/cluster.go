package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/console"
	"github.com/fencegate/fencegate/sharedfence"
	"github.com/fencegate/fencegate/telemetry"
)

// DefaultReplicaReportInterval is how often a replica in fence mode shared
// writes its report for the console's cluster view; a replica silent for
// three intervals is shown down.
const DefaultReplicaReportInterval = 5 * time.Second

// replicaRecent bounds the refusals a report carries: the cluster view
// shows the latest of every replica, not their whole buffers.
const replicaRecent = 50

// replicaReport is what a replica writes in its fencegate_replicas row.
type replicaReport struct {
	InFlight int64               `json:"inflight_writes"`
	ByRoute  map[string]int64    `json:"inflight_by_route,omitempty"`
	Refusals uint64              `json:"refusals"`
	Recent   []telemetry.Refusal `json:"recent_refusals"`
}

// replicaStore keeps the replicas' reports: PostgreSQL's fencegate_replicas
// table, etcd's P/v/ keys (clusteretcd.go).
type replicaStore interface {
	ReportReplica(ctx context.Context, id, name string, started time.Time, report []byte) error
	ForgetReplica(ctx context.Context, id string) error
	Replicas(ctx context.Context) ([]sharedfence.ReplicaRow, error)
}

// replicas reports this replica to the shared store and lists every
// replica's report: the console's Cluster.
type replicas struct {
	s        *Server
	st       replicaStore
	id, name string
	started  time.Time
	interval time.Duration
	log      *slog.Logger

	stop context.CancelFunc
	done chan struct{}
	once sync.Once
}

var _ console.Cluster = (*replicas)(nil)

func newReplicas(s *Server, st replicaStore, interval time.Duration) *replicas {
	if interval <= 0 {
		interval = DefaultReplicaReportInterval
	}
	var b [4]byte // told apart from the other replicas of one host
	rand.Read(b[:])
	name, _ := os.Hostname()
	if name == "" {
		name = "fencegate"
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replicas{s: s, st: st, id: hex.EncodeToString(b[:]), name: name, started: time.Now(),
		interval: interval, log: s.log.With("component", "cluster"), stop: cancel, done: make(chan struct{})}
	go r.run(ctx)
	return r
}

// run reports now and every interval until Close. A failed report is
// logged and retried at the next tick: the view is for operators, and
// fencing never depends on it.
func (r *replicas) run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		if err := r.report(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("replica_report_failed", "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *replicas) report(ctx context.Context) error {
	rep := replicaReport{ByRoute: map[string]int64{}}
	if r.s.gw != nil {
		for _, rt := range r.s.gw.Routes() {
			n := rt.InFlight()
			rep.InFlight += n
			if n > 0 {
				rep.ByRoute[rt.Name] += n
			}
		}
	}
	if rec := r.s.consoleState.recent; rec != nil {
		rep.Refusals = rec.Total()
		rep.Recent = rec.Recent()
		if len(rep.Recent) > replicaRecent {
			rep.Recent = rep.Recent[:replicaRecent]
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return r.st.ReportReplica(ctx, r.id, r.name, r.started, b)
}

// Replicas implements console.Cluster.
func (r *replicas) Replicas(ctx context.Context) ([]console.Replica, error) {
	rows, err := r.st.Replicas(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]console.Replica, 0, len(rows))
	for _, row := range rows {
		var rep replicaReport
		if err := json.Unmarshal(row.Report, &rep); err != nil {
			r.log.Warn("replica_report_unreadable", "replica", row.Name, "err", err.Error())
		}
		ago := row.Now.Sub(row.Seen)
		out = append(out, console.Replica{
			ID: row.ID, Name: row.Name, Self: row.ID == r.id,
			Up:      ago < 3*r.interval,
			Started: row.Started, Seen: row.Seen, SeenAgo: ago.Round(time.Second).String(),
			InFlight: rep.InFlight, InFlightByRoute: rep.ByRoute, Refusals: rep.Refusals, Recent: rep.Recent,
		})
	}
	return out, nil
}

// Close stops reporting and deletes this replica's row: a replica that
// stops cleanly leaves the view instead of showing down.
func (r *replicas) Close() error {
	var err error
	r.once.Do(func() {
		r.stop()
		<-r.done
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = r.st.ForgetReplica(ctx, r.id)
	})
	return err
}

// replicaStore returns where the replicas of fence mode shared report
// themselves for the console's cluster view (PostgreSQL's table, etcd's
// keys); nil in local mode.
func (s *Server) replicaStore(cfg *config.Config) replicaStore {
	if cfg.Fence.Mode != "shared" {
		return nil
	}
	rs, _ := s.store.(replicaStore)
	return rs
}
