package sharedfence

import (
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// Row is what a write's marker read (one snapshot, or one revision, taken
// after the marker was held) found for one key of its scope: the key's
// fence record and its below level (docs/design.md §4, "Hierarchical keys
// in shared mode"). A key without a fence record stands at 0, ready;
// without a below level, at 0, ready, not known.
type Row struct {
	Exists  bool // the key has a fence record
	Highest int64
	Ready   bool
	// Below is B(C): at least the token of every member write admitted
	// through the key; BelowReady: the wait for the key's own writes in
	// flight is done for Below; Known: Below also covers the member
	// records written before, or around, the hierarchy (set by a scan).
	Below      int64
	BelowReady bool
	Known      bool
}

// Action is a wait a write needs before it is decided again, made with
// none of its markers held.
type Action struct {
	Key   string
	Token int64
	// Tree: a tree drain of Key at Token (the collection's advance, if
	// it is behind, a wait for every member's marker and the key's own
	// older writes, then its below level scanned, known). Otherwise a
	// below drain: raise Key's below level to Token first (Raise), then
	// wait for every write of Key's own in flight and set the level ready.
	Tree  bool
	Raise bool
}

// Decide decides w (ScopeKey or ScopeTree on w.Resource, ScopeMember on
// each key of above) on the rows read with w's own marker held: a
// refusal, the waits it needs first, or neither (admitted). rows holds a
// Row for w.Resource and for each key of above.
func Decide(w gateway.Write, above []string, rows map[string]Row) ([]Action, error) {
	var acts []Action
	if w.Scope == gateway.ScopeTree {
		own := rows[w.Resource]
		if w.Token < own.Below {
			ref := fencegate.StaleError(w.Resource, w.Token, own.Below)
			ref.Message += " (for a key below it)"
			return nil, ref
		}
		if !own.Known {
			// Member records written before this key was checked as a
			// collection: read them (and wait for their writes) once.
			acts = append(acts, Action{Key: w.Resource, Token: w.Token, Tree: true})
		}
	}
	for _, a := range above {
		r := rows[a]
		switch {
		case r.Highest == 0:
			// No fence record: the collection has no write of its own to
			// refuse this one or to wait for, and its first one reads
			// the members' records (the tree drain), this one's among
			// them (written before its marker).
		case w.Token < r.Highest:
			ref := fencegate.StaleError(a, w.Token, r.Highest)
			ref.Message += " (a collection above the key written)"
			return nil, ref
		case w.Token == r.Highest:
			if !r.Ready {
				acts = append(acts, Action{Key: a, Token: w.Token, Tree: true})
			}
		case w.Token > r.Below:
			acts = append(acts, Action{Key: a, Token: w.Token, Raise: true})
		case !r.BelowReady:
			acts = append(acts, Action{Key: a, Token: r.Below})
		}
	}
	return acts, nil
}
