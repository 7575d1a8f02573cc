package gateway

import (
	"strconv"
	"testing"

	"github.com/fencegate/fencegate"
)

func newShard(max int) *fenceShard {
	return &fenceShard{index: make(map[uint64]int32), free: -1, head: -1, tail: -1, max: max}
}

// add caches resource with hash h as loaded with st.
func (sh *fenceShard) add(t *testing.T, h uint64, resource string, st fencegate.FenceState) int32 {
	t.Helper()
	i, created := sh.get(h, resource)
	if !created {
		t.Fatalf("get(%s): already cached", resource)
	}
	sh.entries[i].loading = nil
	sh.setState(i, resource, st)
	return i
}

// TestShardHashCollision: resources whose hashes collide are told apart by
// name, and removing one keeps the others.
func TestShardHashCollision(t *testing.T) {
	sh := newShard(10)
	for _, r := range []string{"a", "b", "c"} {
		sh.add(t, 7, r, fencegate.FenceState{Highest: int64(r[0])})
	}
	for _, r := range []string{"a", "b", "c"} {
		i := sh.lookup(7, r)
		if i < 0 || sh.state(i).Resource != r || sh.entries[i].highest != int64(r[0]) {
			t.Fatalf("lookup(%s) = %d", r, i)
		}
	}
	sh.remove(sh.lookup(7, "b"))
	if sh.lookup(7, "b") >= 0 || sh.lookup(7, "a") < 0 || sh.lookup(7, "c") < 0 {
		t.Fatalf("after removing b: a %d, b %d, c %d", sh.lookup(7, "a"), sh.lookup(7, "b"), sh.lookup(7, "c"))
	}
	sh.remove(sh.lookup(7, "c"))
	sh.remove(sh.lookup(7, "a"))
	if len(sh.index) != 0 || sh.n != 0 || sh.head != -1 || sh.tail != -1 {
		t.Fatalf("empty shard: index %v, n %d, head %d, tail %d", sh.index, sh.n, sh.head, sh.tail)
	}
}

// TestShardReclaimsNames: names of evicted entries and replaced owners are
// reclaimed, and the entries kept read back whole.
func TestShardReclaimsNames(t *testing.T) {
	const max = 8
	sh := newShard(max)
	for n := range 20000 {
		r := "/orders/" + strconv.Itoa(n)
		i := sh.add(t, uint64(n), r, fencegate.FenceState{Highest: int64(n), Owner: "worker-" + strconv.Itoa(n)})
		sh.setState(i, r, fencegate.FenceState{Highest: int64(n + 1), Owner: "w" + strconv.Itoa(n), ETag: `"e"`})
	}
	if sh.n != max || len(sh.entries) > max+1 {
		t.Fatalf("%d entries cached, %d allocated; want %d", sh.n, len(sh.entries), max)
	}
	if len(sh.names) > 128<<10 {
		t.Fatalf("names hold %d bytes for %d entries", len(sh.names), sh.n)
	}
	for n := 20000 - max; n < 20000; n++ {
		r := "/orders/" + strconv.Itoa(n)
		i := sh.lookup(uint64(n), r)
		if i < 0 {
			t.Fatalf("%s evicted; want the %d most recent kept", r, max)
		}
		want := fencegate.FenceState{Resource: r, Highest: int64(n + 1), Owner: "w" + strconv.Itoa(n), ETag: `"e"`}
		if got := sh.state(i); got != want {
			t.Fatalf("state(%s) = %+v; want %+v", r, got, want)
		}
	}
}
