// Package bolt is fencegate's embedded store: one bbolt file, opened
// exclusively by one process, holding fence records (and, for the
// coordinator, leases). Every change is fsynced before it is acknowledged;
// concurrent changes share one commit (group commit, commit.go). The ETag
// bookkeeping of `precondition: etag` is kept in memory and written behind
// (etag.go).
package bolt

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fencegate/fencegate"
	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

var bucketFences = []byte("fences")

// Store is the embedded store. It implements gateway.Store.
type Store struct {
	db      *bbolt.DB
	path    string
	commit  *committer
	log     *advanceLog // fence advances (wal.go)
	pending pending     // logged advances not yet checkpointed into bbolt
	known   *keyFilter  // the resources bbolt may have a record of (filter.go)
	etags   etagCache
	logger  *slog.Logger
}

// Options tune Open.
type Options struct {
	// LockTimeout is how long Open waits for another process to release the
	// file. Zero means 1s.
	LockTimeout time.Duration
	// ETagCache is how many objects' ETags (precondition: etag) the store
	// keeps in memory (etag.go); beyond it, an eighth of them are written to
	// the file and forgotten. Zero means 65536.
	ETagCache int
	// Logger receives the advance log's failures and recoveries. Nil
	// means slog.Default().
	Logger *slog.Logger
	// SalvageLog opens a store whose advance log is damaged (Open fails
	// with ErrLogDamaged otherwise): every valid record found is applied,
	// and what was damaged is written to *SalvageLog. Acknowledged
	// advances in the damaged parts are lost; docs/recovery.md says how
	// to raise the fences again.
	SalvageLog *SalvageReport
}

// File layout options. The map is reserved large enough that growing the
// file does not remap it on the commit path (a remap waits for every
// reader), and the file grows in large steps: bbolt fsyncs the file each
// time it grows it, and below AllocSize it grows it on every commit that
// needs a page. The freelist is not written on each commit (it is rebuilt
// when the file is opened), which saves pages per commit; durability of
// the records is unchanged.
const (
	initialMmapSize = 256 << 20
	allocSize       = 16 << 20
)

// ErrLocked reports that another process holds the store file.
var ErrLocked = errors.New("store file is locked by another process (is another fencegate running on it?)")

// Open opens (creating if needed) the store file at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:         opts.LockTimeout,
		NoFreelistSync:  true,
		FreelistType:    bbolt.FreelistMapType,
		InitialMmapSize: initialMmapSize,
		NoStatistics:    true, // DB.Stats is not used; saves a lock per transaction
	})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open store %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db.AllocSize = allocSize
	var known *keyFilter
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		known = newKeyFilter(tx.Bucket(bucketFences))
		return ensureID(tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	nextSeq, nextLSN, err := replay(db, known, path, opts.SalvageLog)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{db: db, path: path, commit: newCommitter(db), known: known, logger: cmp.Or(opts.Logger, slog.Default())}
	s.pending.m = make(map[string]pendingEntry)
	s.log = newAdvanceLog(s, nextSeq, nextLSN)
	s.etags.init(opts.ETagCache)
	return s, nil
}

// allBuckets lists every bucket the store creates at Open.
var allBuckets = [][]byte{bucketFences, bucketLeases, bucketLeaseCounter, bucketMeta}

// DB exposes the bbolt handle to other parts of fencegate that keep their
// records in the same file (the coordinator's leases).
func (s *Store) DB() *bbolt.DB { return s.db }

// Path is the store file's path.
func (s *Store) Path() string { return s.path }

// Close writes the ETags kept in memory to the file, closes it and
// releases its lock. Changes submitted afterwards fail with ErrClosed.
func (s *Store) Close() error {
	err := s.flushETags()
	lerr := s.log.close()
	s.commit.close()
	return errors.Join(err, lerr, s.db.Close())
}

// Ping reports whether the store can take advances: the file is usable
// and the advance log can append (see advanceLog.health).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.log.health(ctx); err != nil {
		return err
	}
	return s.db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketFences) == nil {
			return errors.New("fences bucket missing")
		}
		return nil
	})
}

// fenceRecord is the stored form of a fence record.
type fenceRecord struct {
	Highest   int64     `json:"highest"`
	Owner     string    `json:"owner,omitempty"`
	ETag      string    `json:"etag,omitempty"`
	ETagToken int64     `json:"etag_token,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

func getFence(tx *bbolt.Tx, resource string) (fenceRecord, error) {
	var r fenceRecord
	v := tx.Bucket(bucketFences).Get([]byte(resource))
	if v == nil {
		return r, nil
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("corrupt fence record for %q: %w", resource, err)
	}
	return r, nil
}

// putFence writes the record of resource. Every write of a fence record
// goes through it: it adds resource to known before the transaction can
// commit (filter.go).
func putFence(tx *bbolt.Tx, known *keyFilter, resource string, r fenceRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	known.add(resource)
	return tx.Bucket(bucketFences).Put([]byte(resource), v)
}

func (r fenceRecord) state(resource string) fencegate.FenceState {
	return fencegate.FenceState{
		Resource: resource, Highest: r.Highest, Ready: true,
		Owner: r.Owner, ETag: r.ETag, UpdatedAt: r.UpdatedAt,
	}
}

// LoadFence implements gateway.Store.
func (s *Store) LoadFence(ctx context.Context, resource string) (fencegate.FenceState, error) {
	var r fenceRecord
	// pending first: a checkpoint forgets an entry only after bbolt has it.
	e, ok := s.pending.get(resource)
	if !s.known.mayHave(resource) {
		// Not in bbolt: pending, if anything, is the record.
		if ok {
			r = e.merge(r, 0)
		}
		return s.overlay(r.state(resource)), nil
	}
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		r, err = getFence(tx, resource)
		if ok {
			r = e.merge(r, checkpointed(tx))
		}
		return err
	})
	return s.overlay(r.state(resource)), err
}

// getFenceTx is getFence with the pending advances merged in, for a write
// transaction (serialized with checkpoints, so pending is read after it).
func (s *Store) getFenceTx(tx *bbolt.Tx, resource string) (fenceRecord, error) {
	r, err := getFence(tx, resource)
	if e, ok := s.pending.get(resource); ok && err == nil {
		r = e.merge(r, checkpointed(tx))
	}
	return r, err
}

// overlay puts the ETag kept in memory (etag.go) into st.
func (s *Store) overlay(st fencegate.FenceState) fencegate.FenceState {
	if etag, ok := s.etagOf(st.Resource); ok {
		st.ETag = etag
	}
	return st
}

// AdvanceFence implements gateway.Store: raise-only, durable before return
// (in the advance log, wal.go; concurrent advances share one fdatasync).
func (s *Store) AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	if err := ctx.Err(); err != nil {
		return fencegate.FenceState{}, err
	}
	// What the log acknowledges must fit bbolt at the checkpoint: a key it
	// refuses would stop every checkpoint and the replay at the next Open.
	if resource == "" || len(resource) > bbolt.MaxKeySize {
		return fencegate.FenceState{}, fmt.Errorf("advance fence: resource name of %d bytes (1 to %d)", len(resource), bbolt.MaxKeySize)
	}
	a := s.log.submit(resource, token, owner)
	var err error
	select {
	case err = <-a.done:
	case <-ctx.Done():
		// The log still answers a: it is not released for reuse.
		return fencegate.FenceState{}, fmt.Errorf("advance fence %q: %w", resource, ctx.Err())
	}
	r := a.result
	a.release()
	if err != nil {
		return fencegate.FenceState{}, fmt.Errorf("advance fence %q: %w", resource, err)
	}
	return r.state(resource), nil
}
