package gateway

import (
	"github.com/fencegate/fencegate"
)

// writeLimit caps the fenced writes a route forwards at once
// (max_inflight_writes). A nil *writeLimit is no limit.
//
// Writes over the cap are refused at once rather than queued: a queue would
// only move the wait in front of the fence, where it holds a connection and
// a token that may be stale by the time its turn comes.
type writeLimit struct {
	slots chan struct{}
}

func newWriteLimit(n int) *writeLimit {
	if n <= 0 {
		return nil
	}
	return &writeLimit{slots: make(chan struct{}, n)}
}

// acquire takes a slot; the caller must call release once done.
func (l *writeLimit) acquire() *fencegate.Error {
	if l == nil {
		return nil
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	default:
		return fencegate.TooManyWrites(cap(l.slots))
	}
}

func (l *writeLimit) release() {
	if l != nil {
		<-l.slots
	}
}
