package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
)

// DefaultRecoveryGap is how far Recover raises the token sequence above
// its value on the store: far above anything an old primary could have
// issued after the store's copy was taken (a million tokens a second for
// twelve days), and still room for millions of recoveries below 2^63.
const DefaultRecoveryGap = 1 << 40

// RecoverOptions tune Recover.
type RecoverOptions struct {
	// Gap is added to the token sequence; 0: DefaultRecoveryGap.
	Gap int64
	// Force recovers even if the store is not found gone back (a restored
	// backup that kept its timeline, a loss the guard cannot see).
	Force bool
	// By names who ran it, for the audit record. Default hostname/pid.
	By string
	// Foreign reports the resources whose tokens come from a lock service
	// outside fencegate (a route's token_source: etcd revisions, ZooKeeper
	// czxids). Their fences are left as they are: the floor is a number
	// of the coordinator's sequence, which theirs never reach, so raising
	// them to it would refuse their every holder for good. Their writes
	// are decided by what their source proves (the route's verifier, on
	// every token above a fence). Nil: none.
	Foreign func(resource string) bool
}

// RecoveryResult is what Recover did (Recovered false: nothing to do).
type RecoveryResult struct {
	Recovered      bool   `json:"recovered"`
	Cause          string `json:"cause,omitempty"`
	Timeline       int64  `json:"timeline"`
	SequenceBefore int64  `json:"sequence_before,omitempty"`
	TokenFloor     int64  `json:"token_floor"`
	FencesRaised   int64  `json:"fences_raised,omitempty"`
	LeasesEnded    int64  `json:"leases_ended,omitempty"`
	RecoveryID     int64  `json:"recovery_id,omitempty"`
}

// Recover makes every token issued before it worthless, as an epoch change
// does in Kafka or QJM, so that a store that went back can be served
// again: in one synchronously committed transaction, with issuance held
// off (the lease table locked), it
//
//   - raises the token sequence by opts.Gap: the coordinator never issues a
//     number the old primary may have issued (I5);
//   - records that floor: every replica refuses a write whose token is
//     below it (stale_fencing_token), also on a resource the store has no
//     fence for, and raises every fence below it to it (I1); not on the
//     resources of opts.Foreign, whose tokens are another service's;
//   - ends every lease: their holders' renewals fail and they re-acquire,
//     with tokens above the floor;
//   - records the served timeline, clears the regressed flag, and leaves a
//     row in fencegate_recovery (the audit).
//
// It is idempotent: on a store that is served (not found gone back) it
// does nothing unless opts.Force, so running it twice raises nothing twice.
func (s *Store) Recover(ctx context.Context, opts RecoverOptions) (RecoveryResult, error) {
	if opts.Gap <= 0 {
		opts.Gap = DefaultRecoveryGap
	}
	if opts.By == "" {
		h, _ := os.Hostname()
		opts.By = h + "/" + strconv.Itoa(os.Getpid())
	}
	var res RecoveryResult
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		res = RecoveryResult{}
		if _, err := tx.Exec(ctx, durableSQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = '60s'"); err != nil {
			return err
		}
		// Holds off every acquisition and waits for those in progress
		// (raiseSequenceSQL), and every other recovery.
		if _, err := tx.Exec(ctx, lockIssuanceSQL); err != nil {
			return err
		}
		snap, err := readSnapshot(ctx, tx.Conn().PgConn())
		if err != nil {
			return err
		}
		if snap.inRecovery {
			return errors.New("the database is a standby (in recovery): run the recovery on the primary")
		}
		res.Timeline = snap.timeline
		res.TokenFloor = snap.floor
		tl := strconv.FormatInt(snap.timeline, 10)
		hw := max(s.guard.maxIssued.Load(), s.guard.maxAccepted.Load())
		switch {
		case snap.regressed != "":
			res.Cause = snap.regressed
		case snap.metaTL != "" && snap.metaTL != tl && snap.replication != snap.metaTL+" sync":
			res.Cause = fmt.Sprintf("promoted from timeline %s to %s after a primary that did not replicate synchronously", snap.metaTL, tl)
		case hw > snap.seq:
			res.Cause = fmt.Sprintf("the token sequence stands at %d, below token %d seen", snap.seq, hw)
		case opts.Force:
			res.Cause = "forced by the operator"
		default:
			return nil
		}
		if snap.seq > fencegate.MaxToken-opts.Gap {
			return fmt.Errorf("the token sequence (%d) has no room for a gap of %d", snap.seq, opts.Gap)
		}
		floor := max(snap.seq, hw) + opts.Gap
		res.SequenceBefore = snap.seq
		if _, err := tx.Exec(ctx, `SELECT setval('resource_fence_token_seq', $1::bigint, true)`, floor); err != nil {
			return err
		}
		keep, err := foreignFences(ctx, tx, floor, opts.Foreign)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE fence SET highest = $1, ready = false, owner = $3, updated_at = clock_timestamp()
 WHERE highest < $1 AND resource <> ALL($2::text[])`, floor, keep, recoverOwner)
		if err != nil {
			return err
		}
		res.FencesRaised = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `UPDATE resource_fence SET lease_expires_at = clock_timestamp(), updated_at = clock_timestamp() WHERE lease_expires_at > clock_timestamp()`)
		if err != nil {
			return err
		}
		res.LeasesEnded = tag.RowsAffected()
		repl := tl + " async"
		if snap.repl.Synchronous() {
			repl = tl + " sync"
		}
		b := &pgx.Batch{}
		b.Queue(metaSetSQL, "token_floor", strconv.FormatInt(floor, 10))
		b.Queue(metaSetSQL, "timeline", tl)
		b.Queue(metaSetSQL, "replication", repl)
		b.Queue(`DELETE FROM fencegate_meta WHERE key = 'regressed'`)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `INSERT INTO fencegate_recovery (timeline, previous_timeline, cause, sequence_before, token_floor, fences_raised, leases_ended, by_whom)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
			snap.timeline, snap.metaTL, res.Cause, snap.seq, floor, res.FencesRaised, res.LeasesEnded, opts.By).Scan(&res.RecoveryID)
		if err != nil {
			return err
		}
		res.TokenFloor = floor
		res.Recovered = true
		return nil
	})
	if err != nil {
		return RecoveryResult{}, fmt.Errorf("recover store: %w", err)
	}
	if res.Recovered {
		s.guard.log.Warn("fence store recovered: token sequence raised, older tokens refused, leases ended",
			"cause", res.Cause, "timeline", res.Timeline, "sequence_before", res.SequenceBefore,
			"token_floor", res.TokenFloor, "fences_raised", res.FencesRaised, "leases_ended", res.LeasesEnded,
			"recovery_id", res.RecoveryID, "at", time.Now().UTC().Format(time.RFC3339))
	}
	return res, nil
}

// foreignFences lists the fences below floor whose resources foreign
// reports (RecoverOptions.Foreign): left alone by the recovery.
func foreignFences(ctx context.Context, tx pgx.Tx, floor int64, foreign func(string) bool) ([]string, error) {
	if foreign == nil {
		return []string{}, nil
	}
	keep, err := resourcesWhere(ctx, tx, foreign, 0, `SELECT resource FROM fence WHERE highest < $1`, floor)
	if keep == nil {
		keep = []string{}
	}
	return keep, err
}

// resourcesWhere returns the resources query selects that keep reports,
// at most limit of them (0: all).
func resourcesWhere(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, keep func(string) bool, limit int, query string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() && (limit == 0 || len(out) < limit) {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, err
		}
		if keep(r) {
			out = append(out, r)
		}
	}
	return out, rows.Err()
}

// Recoveries lists the audit records of past recoveries, newest first.
func (s *Store) Recoveries(ctx context.Context) ([]RecoveryResult, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, timeline, cause, sequence_before, token_floor, fences_raised, leases_ended FROM fencegate_recovery ORDER BY id DESC`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RecoveryResult, error) {
		x := RecoveryResult{Recovered: true}
		err := r.Scan(&x.RecoveryID, &x.Timeline, &x.Cause, &x.SequenceBefore, &x.TokenFloor, &x.FencesRaised, &x.LeasesEnded)
		return x, err
	})
}

// recoverOwner is the owner a recovery writes on the fences it raises.
const recoverOwner = "fencegate fence recover"

// RaisedForeign lists up to limit resources that foreign reports
// (RecoverOptions.Foreign) whose fence a recovery raised to its floor and
// no write has moved since: a recovery before token-source routes were
// left alone, or one run without Foreign. Their routes take tokens from
// another counter, which stays below that floor, so every holder of
// those resources is refused until an operator resets the fence.
func (s *Store) RaisedForeign(ctx context.Context, foreign func(string) bool, limit int) ([]string, error) {
	return resourcesWhere(ctx, s.Pool, foreign, limit, `SELECT resource FROM fence WHERE owner = $1 ORDER BY resource`, recoverOwner)
}
