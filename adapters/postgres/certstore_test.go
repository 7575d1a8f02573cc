package postgres

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

func openCertStorage(t *testing.T, url string) *CertStorage {
	t.Helper()
	db, err := Open(context.Background(), url, Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return NewCertStorage(db)
}

// TestCertStorageData: the certmagic.Storage contract: values, missing
// keys as fs.ErrNotExist, directories as key prefixes, recursive delete
// that treats '_' literally.
func TestCertStorageData(t *testing.T) {
	ctx := context.Background()
	s := openCertStorage(t, testenv.Postgres(t).URL)
	for k, v := range map[string]string{
		"certificates/ca/a_b/a_b.crt": "cert",
		"certificates/ca/a_b/a_b.key": "key",
		"certificates/ca/axb/axb.crt": "other",
		"acme/ca/users/ops/ops.json":  "user",
	} {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Store(ctx, "certificates/ca/a_b/a_b.crt", []byte("cert2")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Load(ctx, "certificates/ca/a_b/a_b.crt"); err != nil || string(v) != "cert2" {
		t.Fatalf("Load = %q, %v; want the overwritten value", v, err)
	}
	if _, err := s.Load(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing) err = %v; want fs.ErrNotExist", err)
	}
	if !s.Exists(ctx, "certificates/ca") || !s.Exists(ctx, "certificates/ca/a_b/a_b.key") || s.Exists(ctx, "certificates/c") {
		t.Fatal("Exists: wrong answer for a directory, a key or a partial name")
	}
	info, err := s.Stat(ctx, "certificates/ca/a_b/a_b.crt")
	if err != nil || !info.IsTerminal || info.Size != 5 || info.Modified.IsZero() {
		t.Fatalf("Stat(key) = %+v, %v", info, err)
	}
	if info, err := s.Stat(ctx, "certificates/ca"); err != nil || info.IsTerminal {
		t.Fatalf("Stat(dir) = %+v, %v; want a non-terminal key", info, err)
	}
	if _, err := s.Stat(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat(missing) err = %v", err)
	}
	got, err := s.List(ctx, "certificates/ca", false)
	if want := []string{"certificates/ca/a_b", "certificates/ca/axb"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %q, %v; want %q", got, err, want)
	}
	got, err = s.List(ctx, "certificates", true)
	want := []string{"certificates/ca", "certificates/ca/a_b", "certificates/ca/a_b/a_b.crt", "certificates/ca/a_b/a_b.key", "certificates/ca/axb", "certificates/ca/axb/axb.crt"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List recursive = %q, %v; want %q", got, err, want)
	}
	if err := s.Delete(ctx, "certificates/ca/a_b"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates/ca/a_b") || !s.Exists(ctx, "certificates/ca/axb/axb.crt") {
		t.Fatal("Delete removed too little or too much ('_' must not act as a wildcard)")
	}
	if err := s.Delete(ctx, "never-there"); err != nil {
		t.Fatalf("Delete(missing) = %v; want nil", err)
	}
}

// TestCertStorageLock: two replicas on one database exclude each other; a
// holder that keeps renewing keeps the lock past its TTL; a holder that
// stopped renewing (crashed) loses it once the lease expired; Unlock never
// releases a lock another replica took over.
func TestCertStorageLock(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t).URL
	a, b := openCertStorage(t, url), openCertStorage(t, url)
	for _, s := range []*CertStorage{a, b} {
		s.LockTTL, s.PollInterval = 1500*time.Millisecond, 50*time.Millisecond
	}

	if err := a.Lock(ctx, "issue_cert_localhost"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(ctx, "issue_cert_localhost"); err != nil || ok {
		t.Fatalf("b.TryLock while a holds it = %v, %v; want false", ok, err)
	}
	if ok, err := b.TryLock(ctx, "another"); err != nil || !ok {
		t.Fatalf("b.TryLock(another name) = %v, %v; want true", ok, err)
	}
	b.Unlock(ctx, "another")

	// a renews every TTL/3: well past one TTL, b still cannot take it.
	time.Sleep(2 * a.LockTTL)
	if ok, _ := b.TryLock(ctx, "issue_cert_localhost"); ok {
		t.Fatal("b took a lock whose holder kept renewing it")
	}

	// b waits, a unlocks, b gets it.
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx, "issue_cert_localhost") }()
	if err := a.Unlock(ctx, "issue_cert_localhost"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("b.Lock after a's Unlock: %v", err)
	}

	// b crashes: its renewals stop, its row stays. a waits for the expiry.
	b.mu.Lock()
	h := b.held["issue_cert_localhost"]
	b.mu.Unlock()
	h.stop()
	<-h.done
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := a.Lock(lctx, "issue_cert_localhost"); err != nil {
		t.Fatalf("a.Lock after b's lease expired: %v", err)
	}
	// The crashed b coming back must not release a's lock.
	b.Unlock(ctx, "issue_cert_localhost")
	if ok, _ := b.TryLock(ctx, "issue_cert_localhost"); ok {
		t.Fatal("b's late Unlock released the lock a holds now")
	}
	if err := a.Unlock(ctx, "issue_cert_localhost"); err != nil {
		t.Fatal(err)
	}

	// A waiting Lock honours its context.
	a.Lock(ctx, "held")
	cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer ccancel()
	if err := b.Lock(cctx, "held"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b.Lock with an expiring context = %v; want DeadlineExceeded", err)
	}
	a.Unlock(ctx, "held")
}
