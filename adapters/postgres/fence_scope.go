package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
	"github.com/fencegate/fencegate/sharedfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Hierarchical keys in shared mode (gateway.Scope): the protocol and its
// correctness argument are in docs/design.md §4, "Hierarchical keys in
// shared mode". In short: a write holds only its own key's marker; with
// it held, it reads its own row and the rows of the collections above it
// (the marker pipeline's read statement: one round trip with the marker)
// and is decided on them; a member write newer than a
// collection's below level raises that level durably and waits for the
// collection's own writes in flight; a collection write's advance waits
// for every member's marker (treeDrain).

var _ gateway.TreeFence = (*SharedFence)(nil)

const (
	// markerScopeReadSQL is markerReadSQL for a marker pipeline that
	// carries hierarchical writes: for every key ($1: the pipeline's
	// resources and the keys of its writes' scopes), whether it has a
	// fence row, its fence row and its below row. A key without a fence
	// row stands at 0, ready; without a below row, its level is 0, ready,
	// not known.
	//
	// Why the collections' rows may be read by this statement (and must
	// not be by an earlier one): the argument of docs/design.md §4 needs
	// the collections read after the member's marker is held (ρ > γ).
	// This statement comes after the pipeline's try-locks, so it starts
	// once they were granted (or, for a write that joins a marker its
	// session holds, after the pipeline that took it), and under READ
	// COMMITTED a statement's snapshot is taken when it starts, for every
	// row it reads, the collections' as well as the write's own: an
	// advance of a collection committed before it is seen (the member is
	// refused, or waits), one committed after finds the marker held (the
	// tree drain, which reads the member rows after its advance, waits
	// for it). The try-lock's own statement could not read them: its
	// snapshot predates the grant of its lock (the reason of
	// TestKeyShareReturnsSupersededRow), and a collection's advance and
	// its tree drain's wait on the member's key could both fall between
	// the two: the read would miss the advance, the drain the marker.
	//
	// Each key is a probe of each table's primary key (LATERAL, OFFSET 0:
	// the subqueries are not pulled up into joins). As plain joins, the
	// marker session's cached plan, made while the tables were small,
	// hash-joined them and kept reading every row of both (6 ms a
	// pipeline at 20,000 fence rows, on the session every write of the
	// replica waits for) until an analyze of the tables replanned it.
	markerScopeReadSQL = `SELECT k.resource, f.resource IS NOT NULL, coalesce(f.highest, 0), coalesce(f.ready, true),
       coalesce(b.below, 0), coalesce(b.ready, true), coalesce(b.known, false)
  FROM unnest($1::text[]) AS k(resource)
  LEFT JOIN LATERAL (SELECT resource, highest, ready FROM fence WHERE resource = k.resource OFFSET 0) f ON true
  LEFT JOIN LATERAL (SELECT below, ready, known FROM fence_below WHERE resource = k.resource OFFSET 0) b ON true`

	// treeAdvanceSQL is advanceSQL for a collection write: no advance
	// while a member write newer than the token was admitted below it (a
	// refused write leaves the collection's fence as it was).
	treeAdvanceSQL = `INSERT INTO fence AS f (resource, highest, ready, owner)
SELECT $1, $2, true, $3
 WHERE NOT EXISTS (SELECT 1 FROM fence_below WHERE resource = $1 AND below > $2)
   AND NOT EXISTS (SELECT 1 FROM fence WHERE resource COLLATE "C" >= $4 AND resource COLLATE "C" < $5 AND highest > $2)
ON CONFLICT (resource) DO UPDATE
   SET highest = EXCLUDED.highest, ready = false, owner = EXCLUDED.owner, updated_at = clock_timestamp()
 WHERE f.highest < EXCLUDED.highest
RETURNING highest, ready, owner, etag, updated_at`
	belowSQL = `SELECT coalesce((SELECT below FROM fence_below WHERE resource = $1), 0)`

	// membersSQL lists the fences below a collection ($1, $2 as in
	// highestBelowSQL).
	membersSQL = `SELECT resource, highest FROM fence
 WHERE resource COLLATE "C" >= $1 AND resource COLLATE "C" < $2`

	// waitMarkersSQL waits until no marker is held on any of the keys
	// (migration 100), holding none of them afterwards.
	waitMarkersSQL = `SELECT fence_wait_markers($1::bigint[])`
	// scopeNotifySQL tells every replica that a drain is about to wait for
	// the markers of keys ($1): markers of tokens below $2 are let go as
	// soon as their writes end rather than kept for the next write (payload
	// "K T", the drain notification of the marker sessions; docs/design.md
	// §4). Committed in a transaction of its own before the waits: a
	// notification is delivered only when its transaction commits.
	scopeNotifySQL = `SELECT pg_notify('` + drainChannel + `', k::text || ' ' || $2::bigint::text) FROM unnest($1::bigint[]) AS u(k)`
	// scopeLockSQL waits for every write of one key in flight; held to
	// the end of the drain's transaction.
	scopeLockSQL = `SELECT pg_advisory_xact_lock($1)`
	// scopeBoundSQL: how long until every marker session found gone has
	// passed its forward timeout (drainBoundSQL, for any row).
	scopeBoundSQL = `SELECT coalesce(extract(epoch FROM max(dead_at + forward_timeout) - clock_timestamp()), 0)::float8
  FROM fence_session WHERE dead_at IS NOT NULL`
	// treeUnreadySQL sets a collection's record ($1 at token $2) not ready
	// for its first scan ($3, $4 as in highestBelowSQL; the level not known
	// yet) when it has members: created ready (by its first write or an
	// operator's advance), with the level known it would admit a second
	// write of the token while the first still waits for the members'
	// writes in flight. drainReadySQL sets it ready after the wait. In the
	// scan's transaction: a crash that loses it loses the known level too.
	treeUnreadySQL = `UPDATE fence SET ready = false
 WHERE resource = $1 AND highest = $2 AND ready
   AND NOT coalesce((SELECT known FROM fence_below WHERE resource = $1), false)
   AND EXISTS (SELECT 1 FROM fence WHERE resource COLLATE "C" >= $3 AND resource COLLATE "C" < $4)`
	// belowKnownSQL records the highest token of a collection's members
	// ($2, $3 as in highestBelowSQL) in its below level, known: every
	// member write whose row this scan misses reads the collection's rows
	// after its own advance and raises the level itself. A level this
	// scan raises is not ready: no one has waited yet for the collection's
	// own writes in flight, which a member write between the collection's
	// token and the new level must wait for (decideScope, belowDrain).
	belowKnownSQL = `INSERT INTO fence_below AS b (resource, below, ready, known)
SELECT $1, m.highest, m.highest = 0, true
  FROM (SELECT coalesce(max(highest), 0) AS highest FROM fence WHERE resource COLLATE "C" >= $2 AND resource COLLATE "C" < $3) m
ON CONFLICT (resource) DO UPDATE SET below = greatest(b.below, EXCLUDED.below), known = true,
       ready = b.ready AND b.below >= EXCLUDED.below
 WHERE NOT b.known OR b.below < EXCLUDED.below`
	// belowRaiseSQL raises a collection's below level to a member's token;
	// not ready until the collection's own writes in flight have ended.
	belowRaiseSQL = `INSERT INTO fence_below AS b (resource, below, ready) VALUES ($1, $2, false)
ON CONFLICT (resource) DO UPDATE SET below = EXCLUDED.below, ready = false
 WHERE b.below < EXCLUDED.below`
	belowReadySQL = `UPDATE fence_below SET ready = true
 WHERE resource = $1 AND below = $2 AND NOT ready
   AND NOT EXISTS (SELECT 1 FROM fence_session WHERE dead_at + forward_timeout > clock_timestamp())`
)

// AdmitTree implements gateway.TreeFence: w on its own key (ScopeKey or
// ScopeTree) and ScopeMember on each collection in above (keys above
// w.Resource), by the shared rules (sharedfence.AdmitTree). The permit
// holds w's own marker only.
func (f *SharedFence) AdmitTree(ctx context.Context, w gateway.Write, above []string) (gateway.Permit, error) {
	if err := f.admissible(ctx, w); err != nil {
		return nil, err
	}
	deadline, drain := sharedfence.DrainDeadline(w, f.drainTimeout)
	p, err := sharedfence.AdmitTree(ctx, tree{f}, w, above, deadline, drain)
	if ref := fencegate.AsError(err); ref != nil && ref.Code == fencegate.CodeStaleToken &&
		w.Scope == gateway.ScopeTree && ref.Resource == w.Resource {
		// Close this replica's marker of the key to writers of the token:
		// they are refused on their reads anyway, and a member's wait on
		// the key must not starve.
		key := lockKey(w.Resource)
		f.lane(key).superseded(key, ref.Highest)
	}
	return p, err
}

// tree is the PostgreSQL side of sharedfence.AdmitTree.
type tree struct{ f *SharedFence }

func (t tree) AdmitKey(ctx context.Context, w gateway.Write, scope []string, deadline time.Time, drain time.Duration) (gateway.Permit, map[string]sharedfence.Row, error) {
	p, err := t.f.admitKey(ctx, w, scope, deadline, drain)
	if err != nil || scope == nil {
		return p, nil, err
	}
	// The rows of scope, read by the statement that read w's own row
	// with its marker held (markerScopeReadSQL).
	sp, ok := p.(*sharedPermit)
	if !ok {
		return p, nil, nil
	}
	rows := sp.rows
	sp.rows = nil
	return p, rows, nil
}

func (t tree) TreeDrain(ctx context.Context, w gateway.Write, coll string, token int64, deadline time.Time, drain time.Duration) error {
	st, err := t.f.treeDrain(ctx, w, coll, token, false, time.Until(deadline))
	if err != nil {
		return err
	}
	return t.f.pause(ctx, w, st.bound, deadline, drain)
}

func (t tree) BelowDrain(ctx context.Context, w gateway.Write, acts []sharedfence.Action, deadline time.Time, drain time.Duration) error {
	st, err := t.f.belowDrain(ctx, w, acts, time.Until(deadline))
	if err != nil {
		return err
	}
	return t.f.pause(ctx, w, st.bound, deadline, drain)
}

// treeDrain is the advance (if advance) and drain of a collection write:
// with the advance committed, it reads the members' rows, waits for each
// member's marker, then (coll not ready) for coll's own older writes, and
// records coll ready at token and its members' highest token in its below
// level (known).
func (f *SharedFence) treeDrain(ctx context.Context, w gateway.Write, coll string, token int64, advance bool, drain time.Duration) (drainState, error) {
	return f.onDrainConn(ctx, w, coll, drain, func(ctx context.Context, conn *pgxpool.Conn) (drainState, error) {
		return f.treeDrainOn(ctx, conn, w, coll, token, advance, drain)
	})
}

// onDrainConn runs fn on a pooled connection, bounded by the drain
// timeout (none left: fence_draining).
func (f *SharedFence) onDrainConn(ctx context.Context, w gateway.Write, coll string, drain time.Duration,
	fn func(ctx context.Context, conn *pgxpool.Conn) (drainState, error)) (drainState, error) {
	if drain <= 0 {
		return drainState{}, draining(w, drain, nil)
	}
	conn, err := f.acquire(ctx, coll)
	if err != nil {
		return drainState{}, err
	}
	defer f.finish(conn)
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout+drain)
	defer cancel()
	return fn(ctx, conn)
}

func (f *SharedFence) treeDrainOn(ctx context.Context, conn *pgxpool.Conn, w gateway.Write, coll string, token int64, advance bool, drain time.Duration) (st drainState, err error) {
	st.Highest = token
	prefix := resource.MemberPrefix(coll)
	end, err := prefixEnd(prefix)
	if err != nil {
		return st, fencegate.Unavailable(coll, err)
	}
	b := &pgx.Batch{}
	if advance {
		b.Queue("BEGIN")
		b.Queue(durableSQL)
		b.Queue(treeAdvanceSQL, coll, token, w.Owner, prefix, end)
		b.Queue("COMMIT")
	}
	b.Queue(belowSQL, coll)
	b.Queue(membersSQL, prefix, end)
	// The level's scan, known from here on (asynchronous: lost in a crash,
	// the row says not known again).
	b.Queue("BEGIN")
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(treeUnreadySQL, coll, token, prefix, end)
	b.Queue(belowKnownSQL, coll, prefix, end)
	b.Queue("COMMIT")
	f.roundTrips.Add(1)
	f.waited.Add(1)
	br := conn.SendBatch(ctx, b)
	raised := true
	var adv fencegate.FenceState
	if advance {
		if adv, raised, err = readAdvance(br); err != nil {
			br.Close()
			return st, fencegate.Unavailable(coll, fmt.Errorf("advance fence to %d: %w", token, err))
		}
	}
	members := []int64{}
	var highest, below int64
	err = br.QueryRow().Scan(&below)
	var rs pgx.Rows
	if err == nil {
		rs, err = br.Query()
	}
	if err == nil {
		for rs.Next() {
			var r string
			var h int64
			if err = rs.Scan(&r, &h); err != nil {
				break
			}
			members = append(members, lockKey(r))
			highest = max(highest, h)
		}
		rs.Close()
		if err == nil {
			err = rs.Err()
		}
	}
	for range 5 {
		if err == nil {
			_, err = br.Exec()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return st, fencegate.Unavailable(coll, fmt.Errorf("read the fences below: %w", err))
	}
	if newer := max(below, highest); !raised && newer > token {
		ref := fencegate.StaleError(coll, token, newer)
		ref.Message += " (for a key below it)"
		return st, ref
	}
	if advance && raised && adv.Ready && len(members) == 0 {
		// A new key with nothing below it: no write to wait for.
		return st, nil
	}

	b = &pgx.Batch{}
	b.Queue("BEGIN")
	// A member's marker is waited for whatever its token.
	b.Queue(scopeNotifySQL, members, int64(math.MaxInt64))
	b.Queue(scopeNotifySQL, []int64{lockKey(coll)}, token)
	b.Queue("COMMIT")
	b.Queue("BEGIN")
	b.Queue(drainSettingsSQL, ms(max(drain, time.Millisecond)), ms(drain+time.Second))
	b.Queue(waitMarkersSQL, members)
	// coll's own older writes, while it is not ready (a ready coll has
	// none in flight: markers of its token are not waited for).
	b.Queue(drainLockSQL, coll, lockKey(coll))
	b.Queue(sessionNoticeSQL)
	b.Queue(scopeBoundSQL)
	b.Queue(drainReadySQL, coll, token)
	b.Queue("COMMIT")
	return f.runScope(ctx, conn, w, coll, b, st, drain)
}

// belowDrain raises the below levels of the collections of acts (those
// with raise) to their tokens, in one transaction committed with a WAL
// flush, then waits for each collection's own writes in flight (locks in
// key order) and records the levels ready.
func (f *SharedFence) belowDrain(ctx context.Context, w gateway.Write, acts []sharedfence.Action, drain time.Duration) (drainState, error) {
	return f.onDrainConn(ctx, w, acts[0].Key, drain, func(ctx context.Context, conn *pgxpool.Conn) (drainState, error) {
		return f.runScope(ctx, conn, w, acts[0].Key, queueBelowDrain(acts, drain), drainState{Highest: w.Token}, drain)
	})
}

func queueBelowDrain(acts []sharedfence.Action, drain time.Duration) *pgx.Batch {
	b := &pgx.Batch{}
	for i, a := range acts {
		if !a.Raise {
			continue
		}
		if i == 0 || !slices.ContainsFunc(acts[:i], func(a sharedfence.Action) bool { return a.Raise }) {
			b.Queue("BEGIN")
			b.Queue(durableSQL)
		}
		b.Queue(belowRaiseSQL, a.Key, a.Token)
	}
	if slices.ContainsFunc(acts, func(a sharedfence.Action) bool { return a.Raise }) {
		b.Queue("COMMIT")
	}
	b.Queue("BEGIN")
	for _, a := range acts {
		b.Queue(scopeNotifySQL, []int64{lockKey(a.Key)}, a.Token)
	}
	b.Queue("COMMIT")
	b.Queue("BEGIN")
	b.Queue(drainSettingsSQL, ms(max(drain, time.Millisecond)), ms(drain+time.Second))
	for _, a := range acts {
		b.Queue(scopeLockSQL, lockKey(a.Key))
	}
	b.Queue(sessionNoticeSQL)
	b.Queue(scopeBoundSQL)
	for _, a := range acts {
		b.Queue(belowReadySQL, a.Key, a.Token)
	}
	b.Queue("COMMIT")
	return b
}

// runScope sends a drain's batch and reads its results: waits past the
// drain timeout (or a deadlock PostgreSQL broke) refuse the write with
// fence_draining, other failures with fence_unavailable. A connection
// whose batch failed is closed, not pooled: fence_wait_markers takes
// session-level locks, which a rollback would not release.
func (f *SharedFence) runScope(ctx context.Context, conn *pgxpool.Conn, w gateway.Write, coll string, b *pgx.Batch,
	st drainState, drain time.Duration) (drainState, error) {
	f.roundTrips.Add(1)
	f.waited.Add(1)
	br := conn.Conn().SendBatch(ctx, b)
	var err error
	for _, q := range b.QueuedQueries {
		if q.SQL == scopeBoundSQL {
			var secs float64
			if err = br.QueryRow().Scan(&secs); err == nil && secs > 0 {
				st.bound = time.Duration(secs * float64(time.Second))
			}
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return st, nil
	}
	conn.Conn().Close(context.WithoutCancel(ctx))
	var pe *pgconn.PgError
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "57014" || pe.Code == "40P01") {
		return st, draining(w, drain, err)
	}
	return st, fencegate.Unavailable(coll, err)
}

// resetBelowSQL recomputes the below levels of collections ($1) from the
// fence rows below them ($2, $3: the ranges, as in highestBelowSQL), in a
// reset's transaction (the guard lets the decrease through there). Every
// member write admitted through a collection made its own row's advance
// durable first, so the rows bound every token the level has to cover.
const resetBelowSQL = `UPDATE fence_below b SET below = m.highest
  FROM (SELECT p.resource,
               coalesce((SELECT max(f.highest) FROM fence f
                          WHERE f.resource COLLATE "C" >= p.lo AND f.resource COLLATE "C" < p.hi), 0) AS highest
          FROM unnest($1::text[], $2::text[], $3::text[]) AS p(resource, lo, hi)) m
 WHERE b.resource = m.resource AND b.below > m.highest`

// resetBelow lowers, in the transaction of a reset of res, the below
// levels of the collections above res that only res held up.
func resetBelow(ctx context.Context, tx pgx.Tx, res string) error {
	var colls, los, his []string
	for _, p := range resource.Parents(res) {
		lo := resource.MemberPrefix(p)
		hi, err := prefixEnd(lo)
		if err != nil {
			continue
		}
		colls, los, his = append(colls, p), append(los, lo), append(his, hi)
		if tk := gateway.TreeKey(p); tk != p {
			// The collection's tree key ({path} routes) has the same
			// members.
			colls, los, his = append(colls, tk), append(los, lo), append(his, hi)
		}
	}
	if len(colls) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, resetBelowSQL, colls, los, his)
	return err
}
