package sharedfence

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/clock"
)

// RecoveryPoll is how often a write waiting for a lost replica's forward
// timeout looks again: the bound may end early (a replica that came back
// and found its writes ended, on PostgreSQL) and the caller drains again
// after each pause.
const RecoveryPoll = 200 * time.Millisecond

// Draining is the refusal of w when its drain did not end within drain.
func Draining(w gateway.Write, drain time.Duration, err error) error {
	return fencegate.Draining(w.Resource, w.Token, drain, err)
}

// Pause waits, a poll at a time, for d: what is left of a lost replica's
// forward timeout (or a backoff) before w's drain may try again. deadline
// is when w's drain timeout (drain) runs out. A bound that does not fit
// before deadline refuses w with fence_draining, once grace has passed
// since w began (deadline - drain) without the bound ending early, or at
// once when no time is left.
func Pause(ctx context.Context, w gateway.Write, d time.Duration, deadline time.Time, drain, grace time.Duration) error {
	if d <= 0 {
		return nil
	}
	left := time.Until(deadline)
	if left < d && (time.Since(deadline.Add(-drain)) >= grace || left <= 0) {
		return Draining(w, drain, fmt.Errorf("a replica that may have held writes in flight was lost; waiting %s for its forward timeout", d.Round(time.Millisecond)))
	}
	return clock.Sleep(ctx, min(d, RecoveryPoll, max(left, time.Millisecond)))
}

// DrainDeadline returns w's drain timeout (its route's, or def) and when it
// runs out, counted from now: every wait of w's admission shares it.
func DrainDeadline(w gateway.Write, def time.Duration) (time.Time, time.Duration) {
	drain := w.DrainTimeout
	if drain <= 0 {
		drain = def
	}
	return time.Now().Add(drain), drain
}
