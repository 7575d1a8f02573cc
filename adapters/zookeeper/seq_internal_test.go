package zookeeper

import "testing"

// TestSeq: the lowest lock node is found by the sequence number of the
// recipe's names only; any other child (a nested lock's path, a node put
// by hand) is no lock node, whatever its length.
func TestSeq(t *testing.T) {
	for _, c := range []struct {
		name string
		seq  int64
		ok   bool
	}{
		{"_c_3f2a9e1c-lock-0000000007", 7, true},          // Curator, go-zookeeper
		{"lock-0000000012", 12, true},                     // the ZooKeeper docs' recipe
		{"6d1e2c0a4b__lock__0000000003", 3, true},         // kazoo
		{"_c_x-lock-0000000001-lock-0000000002", 2, true}, // the last mark counts
		{"items", 0, false},
		{"a", 0, false},
		{"", 0, false},
		{"lock-", 0, false},
		{"lock-123", 0, false},
		{"lock-+000000001", 0, false},
		{"lock-00000000001", 0, false},
		{"intruder-0000000001", 0, false},
	} {
		n, ok := seq(c.name)
		if n != c.seq || ok != c.ok {
			t.Errorf("seq(%q) = %d, %v; want %d, %v", c.name, n, ok, c.seq, c.ok)
		}
	}
}
