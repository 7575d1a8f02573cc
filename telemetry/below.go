package telemetry

import (
	"context"
	"errors"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

var _ gateway.MemberStore = (*store)(nil)

// HighestBelow passes gateway.MemberStore through to the wrapped store (a
// hierarchical route's collection writes read it); a store without it
// fails the read, and the write is refused fence_unavailable.
func (s *store) HighestBelow(ctx context.Context, prefix string) (int64, error) {
	ms, ok := s.s.(gateway.MemberStore)
	if !ok {
		return 0, errors.New("the store cannot read the fences below a key (hierarchical route)")
	}
	ctx, span := s.start(ctx, "fence.store.below", prefix, 0)
	start := time.Now()
	h, err := ms.HighestBelow(ctx, prefix)
	s.done(span, "below", start, err)
	return h, err
}
