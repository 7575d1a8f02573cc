package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/jackc/pgx/v5"
)

// CertStorage is a certmagic.Storage in PostgreSQL (tables certmagic_data
// and certmagic_locks, migration 030), so that gateway replicas share ACME
// certificates, account keys, challenge tokens and the locks that keep two
// replicas from ordering the same certificate at once, without a shared
// file system.
type CertStorage struct {
	db *Store
	// LockTTL is how long a lock outlives a holder that stopped renewing
	// it (crashed); the holder renews it every LockTTL/3. Default 1m.
	LockTTL time.Duration
	// PollInterval is how often a waiting Lock retries. Default 1s.
	PollInterval time.Duration

	mu   sync.Mutex
	held map[string]*heldLock
}

type heldLock struct {
	holder string
	stop   context.CancelFunc
	done   chan struct{}
}

var (
	_ certmagic.Storage          = (*CertStorage)(nil)
	_ certmagic.TryLocker        = (*CertStorage)(nil)
	_ certmagic.LockLeaseRenewer = (*CertStorage)(nil)
)

// NewCertStorage returns the certificate storage of db.
func NewCertStorage(db *Store) *CertStorage {
	return &CertStorage{db: db, LockTTL: time.Minute, PollInterval: time.Second, held: map[string]*heldLock{}}
}

// String identifies the storage in certmagic's logs.
func (s *CertStorage) String() string { return "postgres" }

func (s *CertStorage) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.db.Timeout)
}

// Store implements certmagic.Storage.
func (s *CertStorage) Store(ctx context.Context, key string, value []byte) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.db.Pool.Exec(ctx, `INSERT INTO certmagic_data (key, value, modified) VALUES ($1, $2, clock_timestamp())
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, modified = excluded.modified`, key, value)
	if err != nil {
		return fmt.Errorf("certificate storage: store %s: %w", key, err)
	}
	return nil
}

// Load implements certmagic.Storage; a missing key is fs.ErrNotExist.
func (s *CertStorage) Load(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var v []byte
	err := s.db.Pool.QueryRow(ctx, `SELECT value FROM certmagic_data WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("certificate storage: %s: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("certificate storage: load %s: %w", key, err)
	}
	return v, nil
}

// Delete implements certmagic.Storage: key and every key under key/.
func (s *CertStorage) Delete(ctx context.Context, key string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	// starts_with, not LIKE: certmagic keys contain '_', a LIKE wildcard.
	_, err := s.db.Pool.Exec(ctx, `DELETE FROM certmagic_data WHERE key = $1 OR starts_with(key, $1 || '/')`, key)
	if err != nil {
		return fmt.Errorf("certificate storage: delete %s: %w", key, err)
	}
	return nil
}

// Exists implements certmagic.Storage: key is a value or a prefix of one.
func (s *CertStorage) Exists(ctx context.Context, key string) bool {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var ok bool
	err := s.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM certmagic_data WHERE key = $1 OR starts_with(key, $1 || '/'))`, key).Scan(&ok)
	return err == nil && ok
}

// List implements certmagic.Storage: the keys directly under path, or with
// recursive every key and "directory" below it.
func (s *CertStorage) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	prefix := strings.TrimSuffix(path, "/") + "/"
	if path == "" {
		prefix = ""
	}
	rows, err := s.db.Pool.Query(ctx, `SELECT key FROM certmagic_data WHERE starts_with(key, $1) ORDER BY key`, prefix)
	if err != nil {
		return nil, fmt.Errorf("certificate storage: list %s: %w", path, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("certificate storage: list %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("certificate storage: %s: %w", path, fs.ErrNotExist)
	}
	seen := map[string]bool{}
	var out []string
	addOnce := func(k string) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, k := range keys {
		rest := strings.Split(k[len(prefix):], "/")
		if !recursive {
			addOnce(prefix + rest[0])
			continue
		}
		for i := range rest {
			addOnce(prefix + strings.Join(rest[:i+1], "/"))
		}
	}
	slices.Sort(out)
	return out, nil
}

// Stat implements certmagic.Storage.
func (s *CertStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var info certmagic.KeyInfo
	err := s.db.Pool.QueryRow(ctx, `SELECT modified, length(value) FROM certmagic_data WHERE key = $1`, key).Scan(&info.Modified, &info.Size)
	if err == nil {
		info.Key, info.IsTerminal = key, true
		return info, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return info, fmt.Errorf("certificate storage: stat %s: %w", key, err)
	}
	if s.Exists(ctx, key) {
		return certmagic.KeyInfo{Key: key}, nil
	}
	return info, fmt.Errorf("certificate storage: %s: %w", key, fs.ErrNotExist)
}

// Lock implements certmagic.Locker: it waits until name is free or its
// holder's lease expired, honouring ctx, then holds it and renews the lease
// in the background until Unlock.
func (s *CertStorage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("certificate storage: lock %s: %w", name, ctx.Err())
		case <-time.After(s.PollInterval):
		}
	}
}

// TryLock implements certmagic.TryLocker.
func (s *CertStorage) TryLock(ctx context.Context, name string) (bool, error) {
	holder := randomHolder()
	qctx, cancel := s.ctx(ctx)
	defer cancel()
	// Takes a free name, or one whose holder stopped renewing; the
	// database's clock decides expiry, so replicas' clocks do not matter.
	tag, err := s.db.Pool.Exec(qctx, `INSERT INTO certmagic_locks (name, holder, expires_at)
		VALUES ($1, $2, clock_timestamp() + $3::interval)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE certmagic_locks.expires_at < clock_timestamp()`, name, holder, s.LockTTL)
	if err != nil {
		return false, fmt.Errorf("certificate storage: lock %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	h := &heldLock{holder: holder, stop: stop, done: make(chan struct{})}
	s.mu.Lock()
	s.held[name] = h
	s.mu.Unlock()
	go s.renew(rctx, name, h)
	return true, nil
}

func (s *CertStorage) renew(ctx context.Context, name string, h *heldLock) {
	defer close(h.done)
	t := time.NewTicker(s.LockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.RenewLockLease(ctx, name, s.LockTTL)
		}
	}
}

// RenewLockLease implements certmagic.LockLeaseRenewer: it extends the
// lease of a lock this process holds.
func (s *CertStorage) RenewLockLease(ctx context.Context, name string, d time.Duration) error {
	s.mu.Lock()
	h := s.held[name]
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("certificate storage: renew %s: not held by this process", name)
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	tag, err := s.db.Pool.Exec(ctx, `UPDATE certmagic_locks SET expires_at = clock_timestamp() + $3::interval
		WHERE name = $1 AND holder = $2`, name, h.holder, d)
	if err != nil {
		return fmt.Errorf("certificate storage: renew %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("certificate storage: renew %s: the lock expired and was taken over", name)
	}
	return nil
}

// Unlock implements certmagic.Locker. It deletes only this holder's row:
// if the lease expired and another replica took the lock, that one keeps it.
func (s *CertStorage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("certificate storage: unlock %s: not held by this process", name)
	}
	h.stop()
	<-h.done
	ctx, cancel := s.ctx(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := s.db.Pool.Exec(ctx, `DELETE FROM certmagic_locks WHERE name = $1 AND holder = $2`, name, h.holder); err != nil {
		return fmt.Errorf("certificate storage: unlock %s: %w", name, err)
	}
	return nil
}

func randomHolder() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
