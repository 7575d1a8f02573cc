package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Group commit of renewals and releases. Renew and Release queue their
// operation; a runner sends everything queued as ONE statement (an UPDATE
// joined with the arrays of the batch's names, tokens and TTLs) in one
// transaction, and each caller gets the answer of its own row. A runner
// sends the next batch as soon as the previous one returned: no timer, an
// idle coordinator sends a lone operation at once with the single
// statement (renewSQL, releaseSQL), and under load the operations that
// arrived during one round trip and commit are the next batch. Each row of
// the batch is decided by the same WHERE clause as the single statement
// (exact record, unexpired by clock_timestamp()), so the outcome of every
// operation is the one it would have had alone at that moment: a renewal of
// an expired or foreign lease fails for that caller only, and tokens never
// change.
//
// A batch names each resource at most once (a second operation on the same
// lease waits for the next batch: an UPDATE .. FROM updates a row once,
// however many batch rows match it). A batch whose statement fails in the
// database (a deadlock with another process's batch, an error raised for one
// row) has changed nothing; its operations are then sent one by one, so a
// failing operation fails only its own caller. A broken connection fails the
// batch's callers, as it would have failed each of them alone.
const (
	// maxLeaseBatch bounds one batch (its arrays, its transaction's row locks).
	maxLeaseBatch = 512
	// batchRunners is how many batches of one kind may be in flight at
	// once per process. One gave the largest batches and the most
	// renewals per second (16 callers: 17.5k/s and 8 per batch, against
	// 12.8k/s with two runners and 5k/s with four, on 2 cores): the
	// callers settle into two cohorts, one in the database while the other
	// queues. Row locks on resource_fence are held only by single
	// statements (and fence reset's table lock, which stops every
	// operation anyway), so one batch waits behind another operation only
	// briefly.
	batchRunners = 1
)

const (
	// renewBatchSQL is renewSQL over arrays ($1 resources, $2 owners, $3
	// tokens, $4 ttls in µs); b.i is the operation's place in the batch.
	renewBatchSQL = `UPDATE resource_fence AS f
SET lease_expires_at = clock_timestamp() + b.ttl * interval '1 microsecond', updated_at = clock_timestamp()
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS b(resource_id, owner_id, token, ttl, i)
WHERE f.resource_id = b.resource_id AND f.owner_id = b.owner_id AND f.highest_token = b.token
  AND f.lease_expires_at > clock_timestamp()
RETURNING b.i, f.lease_expires_at, clock_timestamp()`

	// releaseBatchSQL is releaseSQL over arrays ($1 resources, $2 owners,
	// $3 tokens); it returns the places of the released operations.
	releaseBatchSQL = `UPDATE resource_fence AS f SET lease_expires_at = clock_timestamp(), updated_at = clock_timestamp()
FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS b(resource_id, owner_id, token, i)
WHERE f.resource_id = b.resource_id AND f.owner_id = b.owner_id AND f.highest_token = b.token
  AND f.lease_expires_at > clock_timestamp()
RETURNING b.i`

	// notifyBatchSQL is notifySQL for every resource of a release batch
	// ($1), in a transaction of its own after the batch committed: it
	// notifies the resources that are free when it runs.
	notifyBatchSQL = `SELECT pg_notify('` + ReleaseChannel + `', f.resource_id) FROM resource_fence AS f
WHERE f.resource_id = ANY($1::text[]) AND f.lease_expires_at <= clock_timestamp()`
)

// RenewBatchSQL ($1 resources, $2 owners, $3 tokens, $4 ttls in µs),
// ReleaseBatchSQL ($1 resources, $2 owners, $3 tokens) and NotifyBatchSQL
// ($1 resources) are the statements of a batch of renewals or releases.
const (
	RenewBatchSQL   = renewBatchSQL
	ReleaseBatchSQL = releaseBatchSQL
	NotifyBatchSQL  = notifyBatchSQL
)

// leaseOp is one caller's renewal or release in a batch.
type leaseOp struct {
	ctx             context.Context
	resource, owner string
	token           int64
	ttl             time.Duration // renew only

	// Results, written by the runner before done is closed.
	lease    coordinator.Lease // renew
	released bool              // release
	err      error
	done     chan struct{}
}

// batcher queues operations of one kind and runs them in batches.
type batcher struct {
	exec func(ops []*leaseOp) // sets every op's results

	mu      sync.Mutex
	queue   []*leaseOp
	runners int

	batches atomic.Uint64 // statements sent for more than one operation
	batched atomic.Uint64 // operations they carried
}

// do queues op and waits for its result (op.err), or for ctx to end: then
// it returns ctx.Err() wrapped with what, and op must not be read (the
// operation may still be carried out, as a statement cancelled mid-flight
// may have committed: renewals and releases are harmless to repeat or
// miss).
func (b *batcher) do(ctx context.Context, op *leaseOp, what string) error {
	op.ctx, op.done = ctx, make(chan struct{})
	b.mu.Lock()
	b.queue = append(b.queue, op)
	start := b.runners < batchRunners
	if start {
		b.runners++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		return fmt.Errorf("%s lease %q: %w", what, op.resource, ctx.Err())
	}
}

func (b *batcher) run() {
	for {
		b.mu.Lock()
		batch := b.take()
		if batch == nil {
			b.runners--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if len(batch) > 0 {
			if len(batch) > 1 {
				b.batches.Add(1)
				b.batched.Add(uint64(len(batch)))
			}
			b.exec(batch)
			for _, op := range batch {
				close(op.done)
			}
		}
	}
}

// take removes the next batch from the queue (b.mu held): the queued
// operations in order, each resource once, at most maxLeaseBatch; the others
// stay queued in order. Operations whose caller has gone are finished
// without being sent. It returns nil when the queue is empty.
func (b *batcher) take() []*leaseOp {
	if len(b.queue) == 0 {
		return nil
	}
	batch := make([]*leaseOp, 0, min(len(b.queue), maxLeaseBatch))
	var seen map[string]bool
	rest := b.queue[:0]
	for _, op := range b.queue {
		switch {
		case op.ctx.Err() != nil: // its caller has returned
			op.err = op.ctx.Err()
			close(op.done)
		case len(batch) == maxLeaseBatch || seen[op.resource]:
			rest = append(rest, op)
		default:
			if len(b.queue) > 1 {
				if seen == nil {
					seen = make(map[string]bool, len(b.queue))
				}
				seen[op.resource] = true
			}
			batch = append(batch, op)
		}
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	return batch
}

func (ls *Leases) init() {
	ls.once.Do(func() {
		ls.renews.exec = ls.execRenews
		ls.releases.exec = ls.execReleases
	})
}

// statementError reports whether err was raised by the database for the
// batch's statement (its transaction was rolled back, the connection is
// fine) for a reason that may be one operation's or the batch's own (a
// deadlock with another batch): the operations are then retried one by
// one. Timeouts, cancellation and a database going away fail the whole
// batch instead: each operation alone would wait or fail the same way.
func statementError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "55P03", "57014": // lock_not_available (lock_timeout), query_canceled (statement_timeout)
		return false
	}
	switch pe.Code[:2] {
	case "08", "53", "57", "58", "XX": // connection, resources, operator intervention, system, internal
		return false
	}
	return true
}

// execRenews runs a batch of renewals.
func (ls *Leases) execRenews(ops []*leaseOp) {
	if len(ops) == 1 {
		ls.renewOne(ops[0])
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ls.st.Timeout)
	defer cancel()
	n := len(ops)
	resources, owners := make([]string, n), make([]string, n)
	tokens, ttls := make([]int64, n), make([]int64, n)
	for i, op := range ops {
		resources[i], owners[i], tokens[i], ttls[i] = op.resource, op.owner, op.token, op.ttl.Microseconds()
	}
	renewed := make([]bool, n)
	rows, err := ls.st.Pool.Query(ctx, renewBatchSQL, resources, owners, tokens, ttls)
	if err == nil {
		for rows.Next() {
			var (
				i     int64
				exp   time.Time
				dbNow time.Time
			)
			if err = rows.Scan(&i, &exp, &dbNow); err != nil {
				break
			}
			if i < 1 || i > int64(n) {
				err = fmt.Errorf("renew batch: row %d of %d", i, n)
				break
			}
			op := ops[i-1]
			op.lease = coordinator.Lease{Resource: op.resource, Owner: op.owner, Token: op.token, ExpiresAt: exp, Remaining: exp.Sub(dbNow)}
			renewed[i-1] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	switch {
	case err == nil:
		for i, op := range ops {
			if !renewed[i] {
				op.err = coordinator.ErrLost
			}
		}
	case statementError(err):
		for _, op := range ops {
			ls.renewOne(op)
		}
	default:
		for _, op := range ops {
			op.err = fmt.Errorf("renew lease %q: %w", op.resource, err)
		}
	}
}

// renewOne runs one renewal alone (renewSQL).
func (ls *Leases) renewOne(op *leaseOp) {
	ctx, cancel := ls.timeout(context.WithoutCancel(op.ctx))
	defer cancel()
	l := coordinator.Lease{Resource: op.resource, Owner: op.owner, Token: op.token}
	var dbNow time.Time
	err := ls.st.Pool.QueryRow(ctx, renewSQL, op.resource, op.owner, op.token, op.ttl.Microseconds()).Scan(&l.ExpiresAt, &dbNow)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		op.err = coordinator.ErrLost
	case err != nil:
		op.err = fmt.Errorf("renew lease %q: %w", op.resource, err)
	default:
		l.Remaining = l.ExpiresAt.Sub(dbNow)
		op.lease, op.err = l, nil
	}
}

// execReleases runs a batch of releases: the batch statement and the
// notification of its resources as two transactions in one pipeline (one
// round trip), as Release does for one.
func (ls *Leases) execReleases(ops []*leaseOp) {
	if len(ops) == 1 {
		op := ops[0]
		ctx, cancel := ls.timeout(context.WithoutCancel(op.ctx))
		defer cancel()
		op.released, op.err = ls.releaseOne(ctx, op.resource, op.owner, op.token)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ls.st.Timeout)
	defer cancel()
	released, err := ls.releaseBatch(ctx, ops)
	switch {
	case err == nil:
		for i, op := range ops {
			op.released = released[i]
		}
	case statementError(err):
		for _, op := range ops {
			ctx, cancel := ls.timeout(context.WithoutCancel(op.ctx))
			op.released, op.err = ls.releaseOne(ctx, op.resource, op.owner, op.token)
			cancel()
		}
	default:
		for _, op := range ops {
			op.err = fmt.Errorf("release lease %q: %w", op.resource, err)
		}
	}
}

// releaseBatch sends releaseBatchSQL and notifyBatchSQL in one pipeline
// and reports which operations released their lease. An error of the
// notification alone is not reported (it only delays waiters elsewhere
// until the expiry); neither is one after the release committed.
func (ls *Leases) releaseBatch(ctx context.Context, ops []*leaseOp) ([]bool, error) {
	n := len(ops)
	resources, owners, tokens := make([]string, n), make([]string, n), make([]int64, n)
	for i, op := range ops {
		resources[i], owners[i], tokens[i] = op.resource, op.owner, op.token
	}
	c, err := ls.st.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	conn := c.Conn()
	rel, err := conn.Prepare(ctx, "fencegate_lease_release_batch", releaseBatchSQL)
	if err != nil {
		return nil, err
	}
	ntf, err := conn.Prepare(ctx, "fencegate_lease_notify_batch", notifyBatchSQL)
	if err != nil {
		return nil, err
	}
	m := conn.TypeMap()
	relArgs, err := encodeBinary(m, rel, resources, owners, tokens)
	if err != nil {
		return nil, err
	}
	ntfArgs, err := encodeBinary(m, ntf, resources)
	if err != nil {
		return nil, err
	}
	binary := []int16{pgtype.BinaryFormatCode}
	p := conn.PgConn().StartPipeline(ctx)
	p.SendQueryStatement(rel, relArgs, binary, binary)
	p.SendPipelineSync()
	p.SendQueryStatement(ntf, ntfArgs, binary, nil)
	p.SendPipelineSync()
	released := make([]bool, n)
	committed := false
	err = p.Flush()
	for step := 0; err == nil && step < 4; step++ {
		var r any
		if r, err = p.GetResults(); err != nil {
			break
		}
		switch r := r.(type) {
		case *pgconn.ResultReader:
			for step == 0 && r.NextRow() {
				var i int64
				if err = m.Scan(pgtype.Int8OID, pgtype.BinaryFormatCode, r.Values()[0], &i); err == nil && (i < 1 || i > int64(n)) {
					err = fmt.Errorf("release batch: row %d of %d", i, n)
				}
				if err != nil {
					break
				}
				released[i-1] = true
			}
			if _, cerr := r.Close(); err == nil {
				err = cerr
			}
		case *pgconn.PipelineSync:
			if step == 1 {
				committed = true // the release's transaction ended
			}
		default:
			err = fmt.Errorf("unexpected pipeline result %T", r)
		}
	}
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil && !committed {
		return nil, err
	}
	return released, nil
}

// encodeBinary encodes args for the prepared statement sd in binary.
func encodeBinary(m *pgtype.Map, sd *pgconn.StatementDescription, args ...any) ([][]byte, error) {
	if len(sd.ParamOIDs) != len(args) {
		return nil, fmt.Errorf("statement %s takes %d parameters, got %d", sd.Name, len(sd.ParamOIDs), len(args))
	}
	out := make([][]byte, len(args))
	for i, a := range args {
		b, err := m.Encode(sd.ParamOIDs[i], pgtype.BinaryFormatCode, a, nil)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}
