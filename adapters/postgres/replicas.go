package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/sharedfence"
)

// ReportReplica writes this replica's row (and forgets replicas silent for
// sharedfence.ReplicaForget).
func (s *Store) ReportReplica(ctx context.Context, id, name string, started time.Time, report []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO fencegate_replicas (id, name, started_at, seen_at, report) VALUES ($1, $2, $3, clock_timestamp(), $4)
 ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, seen_at = EXCLUDED.seen_at, report = EXCLUDED.report`, id, name, started, report)
	b.Queue(`DELETE FROM fencegate_replicas WHERE seen_at < clock_timestamp() - make_interval(secs => $1)`, sharedfence.ReplicaForget.Seconds())
	if err := s.Pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("report replica: %w", err)
	}
	return nil
}

// ForgetReplica deletes a replica's row (it stops).
func (s *Store) ForgetReplica(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	if _, err := s.Pool.Exec(ctx, `DELETE FROM fencegate_replicas WHERE id = $1`, id); err != nil {
		return fmt.Errorf("forget replica: %w", err)
	}
	return nil
}

// Replicas returns every replica's row, by name.
func (s *Store) Replicas(ctx context.Context) ([]sharedfence.ReplicaRow, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	rows, err := s.Pool.Query(ctx, `SELECT id, name, started_at, seen_at, clock_timestamp(), report FROM fencegate_replicas ORDER BY name, id`)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sharedfence.ReplicaRow, error) {
		var r sharedfence.ReplicaRow
		err := row.Scan(&r.ID, &r.Name, &r.Started, &r.Seen, &r.Now, &r.Report)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return out, nil
}
