package gateway_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
)

// admitTree admits a write of key as a hierarchical route does: ScopeMember
// on every key above it, then ScopeTree on the key itself.
func admitTree(f gateway.Fence, key string, tok int64) ([]gateway.Permit, error) {
	var ps []gateway.Permit
	for _, p := range resource.Parents(key) {
		pm, err := f.Admit(context.Background(), gateway.Write{Resource: p, Token: tok, Scope: gateway.ScopeMember})
		if err != nil {
			release(ps)
			return nil, err
		}
		ps = append(ps, pm)
	}
	pm, err := f.Admit(context.Background(), gateway.Write{Resource: key, Token: tok, Scope: gateway.ScopeTree})
	if err != nil {
		release(ps)
		return nil, err
	}
	return append(ps, pm), nil
}

func release(ps []gateway.Permit) {
	for _, p := range ps {
		p.Release()
	}
}

// TestHierarchicalFence: a collection write is refused after a newer
// member write, also after a restart (the store is scanned); a member
// write is refused after a newer collection write; siblings and the
// collection's own repeated token stay free.
func TestHierarchicalFence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := gateway.NewLocalFence(st, gateway.LocalFenceOptions{})
	ps, err := admitTree(f, "/dav/coll/m", 9)
	if err != nil {
		t.Fatal(err)
	}
	release(ps)
	// A sibling with an older token is another owner's: admitted.
	ps, err = admitTree(f, "/dav/coll/other", 3)
	if err != nil {
		t.Fatalf("sibling with older token: %v", err)
	}
	release(ps)
	for _, key := range []string{"/dav/coll", "/dav"} {
		if _, err := admitTree(f, key, 3); code(err) != fencegate.CodeStaleToken {
			t.Fatalf("collection %s with token 3 after member 9: %v; want stale", key, err)
		}
	}
	st.Close()

	// After a restart the cache is empty: the store is scanned.
	st, err = bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f = gateway.NewLocalFence(st, gateway.LocalFenceOptions{})
	if _, err := admitTree(f, "/dav/coll", 3); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("after restart, collection with token 3 after member 9: %v; want stale", err)
	}
	ps, err = admitTree(f, "/dav/coll", 10)
	if err != nil {
		t.Fatalf("collection with token 10: %v", err)
	}
	release(ps)
	if _, err := admitTree(f, "/dav/coll/m", 9); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("member with token 9 after collection 10: %v; want stale", err)
	}
	if _, err := admitTree(f, "/dav/coll/new/deep", 9); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("new deep member with token 9 after collection 10: %v; want stale", err)
	}
	ps, err = admitTree(f, "/dav/coll/m", 10)
	if err != nil {
		t.Fatalf("member with the collection's token: %v", err)
	}
	release(ps)
}

// TestHierarchicalDrain proves I2 across levels: a newer collection write
// waits for an older member write in flight, and a newer member write for
// an older collection write in flight.
func TestHierarchicalDrain(t *testing.T) {
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{DrainTimeout: 100 * time.Millisecond})
	member, err := admitTree(f, "/c/m", 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admitTree(f, "/c", 6); code(err) != fencegate.CodeFenceDraining {
		t.Fatalf("collection 6 while member 5 in flight: %v; want fence_draining", err)
	}
	release(member)
	coll, err := admitTree(f, "/c", 7)
	if err != nil {
		t.Fatalf("collection 7 after the member landed: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		ps, err := admitTree(f, "/c/m", 8)
		release(ps)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("member 8 admitted while collection 7 in flight: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	release(coll)
	if err := <-done; err != nil {
		t.Fatalf("member 8 after the collection landed: %v", err)
	}
}
