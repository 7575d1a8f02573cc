// Package clock holds the one context-aware pause that fencegate's
// packages share.
package clock

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done (returning ctx.Err()). A d of zero
// or less returns at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
