package sharedfence

import (
	"slices"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestDecide: the decision of a hierarchical write on the rows read with
// its marker held, the same on every store.
func TestDecide(t *testing.T) {
	ready := func(h int64) Row {
		return Row{Exists: true, Highest: h, Ready: true, Below: h, BelowReady: true, Known: true}
	}
	for _, tc := range []struct {
		name  string
		w     gateway.Write
		above []string
		rows  map[string]Row
		stale int64 // the highest a refusal names; 0: not refused
		acts  []Action
	}{
		{"member below a collection never written", gateway.Write{Resource: "/c/m", Token: 5}, []string{"/c"},
			map[string]Row{"/c/m": ready(5)}, 0, nil},
		{"member older than the collection", gateway.Write{Resource: "/c/m", Token: 5}, []string{"/c"},
			map[string]Row{"/c": ready(7)}, 7, nil},
		{"member of the collection's token, ready", gateway.Write{Resource: "/c/m", Token: 7}, []string{"/c"},
			map[string]Row{"/c": ready(7)}, 0, nil},
		{"member of the collection's token, not ready: its tree drain", gateway.Write{Resource: "/c/m", Token: 7}, []string{"/c"},
			map[string]Row{"/c": {Exists: true, Highest: 7}}, 0, []Action{{Key: "/c", Token: 7, Tree: true}}},
		{"member above the below level: raise it", gateway.Write{Resource: "/c/m", Token: 9}, []string{"/c"},
			map[string]Row{"/c": ready(7)}, 0, []Action{{Key: "/c", Token: 9, Raise: true}}},
		{"member under a below level not ready: wait for it", gateway.Write{Resource: "/c/m", Token: 8}, []string{"/c"},
			map[string]Row{"/c": {Exists: true, Highest: 7, Ready: true, Below: 9, Known: true}}, 0, []Action{{Key: "/c", Token: 9}}},
		{"member under a ready below level", gateway.Write{Resource: "/c/m", Token: 8}, []string{"/c"},
			map[string]Row{"/c": {Exists: true, Highest: 7, Ready: true, Below: 9, BelowReady: true}}, 0, nil},
		{"collection older than a member", gateway.Write{Resource: "/c", Token: 8, Scope: gateway.ScopeTree}, nil,
			map[string]Row{"/c": {Exists: true, Highest: 7, Ready: true, Below: 9, BelowReady: true, Known: true}}, 9, nil},
		{"collection never scanned: its tree drain", gateway.Write{Resource: "/c", Token: 8, Scope: gateway.ScopeTree}, nil,
			map[string]Row{"/c": {Exists: true, Highest: 8, Ready: true}}, 0, []Action{{Key: "/c", Token: 8, Tree: true}}},
		{"collection known and ready", gateway.Write{Resource: "/c", Token: 8, Scope: gateway.ScopeTree}, nil,
			map[string]Row{"/c": ready(8)}, 0, nil},
		{"stale at the second level above", gateway.Write{Resource: "/a/b/m", Token: 8}, []string{"/a", "/a/b"},
			map[string]Row{"/a": ready(9), "/a/b": ready(3)}, 9, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acts, err := Decide(tc.w, tc.above, tc.rows)
			if tc.stale != 0 {
				ref := fencegate.AsError(err)
				if ref == nil || ref.Code != fencegate.CodeStaleToken || ref.Highest != tc.stale {
					t.Fatalf("got %v; want stale below %d", err, tc.stale)
				}
				return
			}
			if err != nil || !slices.Equal(acts, tc.acts) {
				t.Fatalf("got %+v, %v; want %+v", acts, err, tc.acts)
			}
		})
	}
}
