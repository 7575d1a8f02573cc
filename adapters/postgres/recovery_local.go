package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/jackc/pgx/v5"
)

// The serving record of a local fence over PostgreSQL (fence mode local;
// gateway.ServingStore, docs/design.md "After a crash (local fence)"), in
// fencegate_meta: key local_serving holds "busy <bound ms>", "quiet" or
// "stopped"; key "local_draining <resource>" holds "<token> <unix ns>" for
// a resource advanced over older writes in flight since the last quiet
// record. Fence mode local means one gateway serves these resources, so
// the database holds one such record. Each change is committed with a WAL
// flush before it returns.
var _ gateway.ServingStore = (*Store)(nil)

const (
	servingKey      = "local_serving"
	drainingPrefix  = "local_draining "
	servingStopped  = "stopped"
	servingQuiet    = "quiet"
	servingBusyWord = "busy"
)

// LastRun implements gateway.ServingStore.
func (s *Store) LastRun(ctx context.Context) (gateway.PreviousRun, error) {
	var prev gateway.PreviousRun
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var v string
	err := s.Pool.QueryRow(ctx, `SELECT value FROM fencegate_meta WHERE key = $1`, servingKey).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return prev, nil // never served in fence mode local
	}
	if err != nil {
		return prev, fmt.Errorf("read the serving record: %w", err)
	}
	word, ms, _ := strings.Cut(v, " ")
	if word != servingBusyWord {
		return prev, nil
	}
	prev.Unclean = true
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
		prev.Bound = time.Duration(n) * time.Millisecond
	}
	rows, err := s.Pool.Query(ctx, `SELECT substr(key, length($1) + 1), value FROM fencegate_meta WHERE starts_with(key, $1)`, drainingPrefix)
	if err != nil {
		return prev, fmt.Errorf("read the draining records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var res, val string
		if err := rows.Scan(&res, &val); err != nil {
			return prev, err
		}
		tok, at, _ := strings.Cut(val, " ")
		t, err1 := strconv.ParseInt(tok, 10, 64)
		ns, err2 := strconv.ParseInt(at, 10, 64)
		if err1 != nil || err2 != nil {
			return prev, fmt.Errorf("corrupt draining record for %q: %q", res, val)
		}
		if prev.Draining == nil {
			prev.Draining = map[string]gateway.Draining{}
		}
		prev.Draining[res] = gateway.Draining{Token: t, At: time.Unix(0, ns)}
	}
	return prev, rows.Err()
}

// MarkServing implements gateway.ServingStore. A quiet record forgets the
// draining records in the same transaction.
func (s *Store) MarkServing(ctx context.Context, busy bool, bound time.Duration) error {
	v := servingQuiet
	if busy {
		v = servingBusyWord + " " + strconv.FormatInt(bound.Milliseconds(), 10)
	}
	return s.metaTx(ctx, func(b *pgx.Batch) {
		if !busy {
			b.Queue(`DELETE FROM fencegate_meta WHERE starts_with(key, $1)`, drainingPrefix)
		}
		b.Queue(metaSetSQL, servingKey, v)
	})
}

// MarkDraining implements gateway.ServingStore.
func (s *Store) MarkDraining(ctx context.Context, resource string, token int64, at time.Time) error {
	v := strconv.FormatInt(token, 10) + " " + strconv.FormatInt(at.UnixNano(), 10)
	return s.metaTx(ctx, func(b *pgx.Batch) { b.Queue(metaSetSQL, drainingPrefix+resource, v) })
}

// EndServing implements gateway.ServingStore.
func (s *Store) EndServing(ctx context.Context) error {
	return s.metaTx(ctx, func(b *pgx.Batch) { b.Queue(metaSetSQL, servingKey, servingStopped) })
}

// metaTx runs the statements queue adds in one transaction committed with
// a WAL flush, in one round trip.
func (s *Store) metaTx(ctx context.Context, queue func(b *pgx.Batch)) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(durableSQL)
	queue(b)
	b.Queue("COMMIT")
	if err := s.Pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("serving record: %w", err)
	}
	return nil
}
