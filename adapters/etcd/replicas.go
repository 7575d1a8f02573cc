package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/sharedfence"
)

// The console's cluster view (server/cluster.go) on etcd: each replica
// keeps its report in P/v/ID, put again every report interval, and the
// view lists the keys under P/v/. The keys are on no lease, so a replica
// that crashed stays listed (shown down) until sharedfence.ReplicaForget;
// one that
// stops cleanly deletes its key. etcd has no clock to stamp a report with:
// Seen is the reporting replica's clock and Now the listing one's, so the
// view's "down" is judged across the two replicas' clocks (off by their
// skew; the view is for operators, fencing never reads it). These keys
// are apart from the fence's replica keys (P/r/, P/a/, P/d/), which drains
// read.

// replicaValue is the value of a report key.
type replicaValue struct {
	Name    string          `json:"n"`
	Started int64           `json:"s"` // unix milliseconds
	Seen    int64           `json:"t"` // unix milliseconds, the reporter's clock
	Report  json.RawMessage `json:"r"`
}

func (f *Store) reportDir() string { return f.prefix + "/v/" }

// ReportReplica puts this replica's report, and deletes the keys of
// replicas silent for sharedfence.ReplicaForget.
func (f *Store) ReportReplica(ctx context.Context, id, name string, started time.Time, report []byte) error {
	if !json.Valid(report) || strings.ContainsAny(id, "/\x00") {
		return fmt.Errorf("report replica %q: not a JSON report or not an id", id)
	}
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	now := time.Now()
	v, _ := json.Marshal(replicaValue{Name: name, Started: started.UnixMilli(), Seen: now.UnixMilli(), Report: report})
	f.requests.Add(1)
	if _, err := f.client.Put(ctx, f.reportDir()+id, string(v)); err != nil {
		return fmt.Errorf("report replica: %w", err)
	}
	rows, err := f.replicaRows(ctx)
	if err != nil {
		return err
	}
	var dels []clientv3.Op
	var cmps []clientv3.Cmp
	for _, r := range rows {
		if now.Sub(r.row.Seen) > sharedfence.ReplicaForget {
			k := f.reportDir() + r.row.ID
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", r.modRev))
			dels = append(dels, clientv3.OpDelete(k))
		}
	}
	if len(dels) == 0 {
		return nil
	}
	// A key reported again meanwhile fails its compare: kept.
	f.requests.Add(1)
	if _, err := f.client.Txn(ctx).If(cmps...).Then(dels...).Commit(); err != nil {
		return fmt.Errorf("forget silent replicas: %w", err)
	}
	return nil
}

// ForgetReplica deletes a replica's report (it stops).
func (f *Store) ForgetReplica(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	if _, err := f.client.Delete(ctx, f.reportDir()+id); err != nil {
		return fmt.Errorf("forget replica: %w", err)
	}
	return nil
}

// Replicas returns every replica's report, by name (one range read).
func (f *Store) Replicas(ctx context.Context) ([]sharedfence.ReplicaRow, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	rows, err := f.replicaRows(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sharedfence.ReplicaRow, len(rows))
	for i, r := range rows {
		out[i] = r.row
	}
	return out, nil
}

type replicaKey struct {
	row    sharedfence.ReplicaRow
	modRev int64
}

func (f *Store) replicaRows(ctx context.Context) ([]replicaKey, error) {
	dir := f.reportDir()
	f.requests.Add(1)
	resp, err := f.client.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	now := time.Now()
	out := make([]replicaKey, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var v replicaValue
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("replica report %q: %w", kv.Key, err)
		}
		out = append(out, replicaKey{modRev: kv.ModRevision, row: sharedfence.ReplicaRow{
			ID: strings.TrimPrefix(string(kv.Key), dir), Name: v.Name,
			Started: time.UnixMilli(v.Started).UTC(), Seen: time.UnixMilli(v.Seen).UTC(), Now: now.UTC(), Report: v.Report,
		}})
	}
	// By name, as PostgreSQL's ORDER BY name, id (the keys are by id).
	slices.SortStableFunc(out, func(a, b replicaKey) int { return strings.Compare(a.row.Name, b.row.Name) })
	return out, nil
}
