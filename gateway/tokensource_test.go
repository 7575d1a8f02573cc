package gateway

import (
	"context"
	"errors"
	"testing"
)

type countingVerifier struct {
	calls int
	err   error
}

func (v *countingVerifier) VerifyToken(context.Context, string, int64) error {
	v.calls++
	return v.err
}

func TestRouteVerify(t *testing.T) {
	errDefault := errors.New("default verifier")
	verify := RouteVerify(func(context.Context, string, int64) error { return errDefault })
	route := &countingVerifier{}
	if err := verify(withTokenVerifier(context.Background(), route), "/r", 7); err != nil || route.calls != 1 {
		t.Fatalf("with a route verifier: err %v, calls %d; want nil, 1", err, route.calls)
	}
	if err := verify(context.Background(), "/r", 7); err != errDefault {
		t.Fatalf("without one: %v; want the default's error", err)
	}
	if err := RouteVerify(nil)(context.Background(), "/r", 7); err != nil {
		t.Fatalf("no default: %v; want nil", err)
	}
}

func TestVerifiedCache(t *testing.T) {
	v := &countingVerifier{}
	c := &VerifiedCache{Verifier: v, Size: 2}
	ctx := context.Background()
	for range 3 {
		if err := c.VerifyToken(ctx, "/a", 5); err != nil {
			t.Fatal(err)
		}
	}
	if v.calls != 1 {
		t.Fatalf("a repeated token: %d reads; want 1", v.calls)
	}
	c.VerifyToken(ctx, "/a", 6)
	c.VerifyToken(ctx, "/a", 5) // older than the one remembered: asked again
	if v.calls != 3 {
		t.Fatalf("calls %d; want 3", v.calls)
	}
	v.err = errors.New("refused")
	if err := c.VerifyToken(ctx, "/b", 9); err == nil {
		t.Fatal("a refusal was not passed on")
	}
	v.err = nil
	if err := c.VerifyToken(ctx, "/b", 9); err != nil || v.calls != 5 {
		t.Fatalf("after a refusal: err %v, calls %d; want nil, 5 (refusals are not remembered)", err, v.calls)
	}
	c.VerifyToken(ctx, "/c", 1) // beyond Size: the cache starts over
	c.VerifyToken(ctx, "/a", 6)
	if v.calls != 7 {
		t.Fatalf("calls %d; want 7 after the cache was full", v.calls)
	}
}
