package sharedfence

import (
	"context"
	"errors"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// ErrMemberAlone refuses a ScopeMember admission made on its own: a
// shared fence decides it with the member's own marker held (AdmitTree).
var ErrMemberAlone = errors.New("a write below a collection is admitted together with its own key (gateway.TreeFence)")

// Tree is what AdmitTree needs of a store: a write's admission on its own
// key, whose marker read also returns the rows of a scope, and the two
// waits a hierarchical write may need (docs/design.md §4, "Hierarchical
// keys in shared mode"). Each wait returns nil also when the fence moved
// on meanwhile: AdmitTree decides again.
type Tree interface {
	// AdmitKey admits w on its own key (a ScopeTree write's advance and
	// drain wait for its members as TreeDrain does). The read that decides
	// it, made with its marker held, also reads the rows of scope (none
	// if scope is nil), returned with the permit.
	AdmitKey(ctx context.Context, w gateway.Write, scope []string, deadline time.Time, drain time.Duration) (gateway.Permit, map[string]Row, error)
	// TreeDrain drains collection coll at token (its record stands
	// there): it scans the records below coll into its below level
	// (known), waits for every marker below coll and, coll not ready, for
	// coll's own older ones, and for the replicas found gone, then sets
	// coll ready.
	TreeDrain(ctx context.Context, w gateway.Write, coll string, token int64, deadline time.Time, drain time.Duration) error
	// BelowDrain raises the below level of each collection of acts with
	// Raise to its token (durably, not ready), waits for every marker of
	// each collection's own key and for the replicas found gone, and sets
	// the levels ready.
	BelowDrain(ctx context.Context, w gateway.Write, acts []Action, deadline time.Time, drain time.Duration) error
}

// AdmitTree is gateway.TreeFence's AdmitTree on store t: w on its own key
// (ScopeKey or ScopeTree) and ScopeMember on each collection in above
// (keys above w.Resource, in key order). The permit holds w's own marker
// only. deadline is when w's drain timeout (drain) runs out.
func AdmitTree(ctx context.Context, t Tree, w gateway.Write, above []string, deadline time.Time, drain time.Duration) (gateway.Permit, error) {
	if w.Scope == gateway.ScopeMember {
		return nil, fencegate.Unavailable(w.Resource, ErrMemberAlone)
	}
	if w.Scope == gateway.ScopeKey && len(above) == 0 {
		// A key of no hierarchy: its own marker decides it (no read of
		// the rows around it: there are none to read).
		p, _, err := t.AdmitKey(ctx, w, nil, deadline, drain)
		return p, err
	}
	keys := append([]string{w.Resource}, above...)
	for {
		p, rows, err := t.AdmitKey(ctx, w, keys, deadline, drain)
		if err != nil {
			return nil, err
		}
		if rows == nil {
			p.Release()
			return nil, fencegate.Unavailable(w.Resource, errors.New("the marker's read returned no rows of the collections above the key"))
		}
		acts, ref := Decide(w, above, rows)
		if ref != nil {
			p.Release()
			return nil, ref
		}
		if len(acts) == 0 {
			return p, nil
		}
		// Every wait below is made with no marker of this write held: a
		// collection's drain waits for its members' markers, this one's
		// among them.
		p.Release()
		var below []Action
		for _, a := range acts {
			if !a.Tree {
				below = append(below, a)
				continue
			}
			if err := t.TreeDrain(ctx, w, a.Key, a.Token, deadline, drain); err != nil {
				return nil, err
			}
		}
		if len(below) > 0 {
			if err := t.BelowDrain(ctx, w, below, deadline, drain); err != nil {
				return nil, err
			}
		}
		if time.Until(deadline) <= 0 {
			return nil, Draining(w, drain, nil)
		}
	}
}
