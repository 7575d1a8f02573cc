package gateway

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate"
)

// Ceiling returns a verifier (LocalFenceOptions.Verify and the shared
// fence's Verify) for fences whose tokens are not checked against a
// coordinator: a write may raise a fence by at most maxAdvance above its
// current highest (a new resource: maxAdvance above 0), so that one
// request carrying Fencing-Token: 9223372036854775807 cannot make a
// resource unwritable for every later owner (the fence only rises, I7).
// Like every verifier it runs only when a token would advance the fence,
// never on the repeated-token path. state reads the fence's current record
// (the fence's own State: from memory for a local fence).
func Ceiling(state func(ctx context.Context, resource string) (fencegate.FenceState, error), maxAdvance int64) func(context.Context, string, int64) error {
	return func(ctx context.Context, resource string, token int64) error {
		st, err := state(ctx, resource)
		if err != nil {
			return err
		}
		return CheckAdvance(resource, token, st.Highest, maxAdvance, "the fence's highest token")
	}
}

// CheckAdvance refuses token when it is more than maxAdvance above base
// (what names base in the message); maxAdvance < 0 is no ceiling.
func CheckAdvance(resource string, token, base, maxAdvance int64, what string) error {
	if maxAdvance < 0 || token <= base || token-base <= maxAdvance {
		return nil
	}
	return &fencegate.Error{
		Code: fencegate.CodeTokenOutOfRange,
		Message: fmt.Sprintf("token %d is more than fence.max_advance (%d) above %s for %s (%d)",
			token, maxAdvance, what, resource, base),
		Resource: resource, Token: token,
	}
}
