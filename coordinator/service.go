package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// Limits on names. A resource must fit a PostgreSQL NOTIFY payload (8000
// bytes) and is a gateway resource key (an S3 bucket/key is at most ~1100).
const (
	MaxResourceBytes = 4000
	MaxOwnerBytes    = 256
)

// Service is the lease service over a Backend. The zero value is not usable:
// set Backend. Call Start to receive releases made by other processes, and
// Close to stop that.
type Service struct {
	Backend Backend
	// DefaultTTL is the lease time when a request names none. Zero: 30s.
	DefaultTTL time.Duration
	// MaxTTL caps a request's ttl (larger is invalid_request). Zero: 10m.
	MaxTTL time.Duration
	// MaxWait caps a request's wait (larger is invalid_request). Zero: 1m.
	MaxWait time.Duration
	// OnIssue, if set, is called after a new token was durably issued and
	// before the worker is answered (a holder's retried acquire keeps its
	// token and does not call it). If it fails, the new lease is released
	// and the acquisition is answered 503: the worker retries and gets a
	// newer token. Shared fence mode raises the fence here.
	OnIssue func(ctx context.Context, resource string, token int64, owner string) error
	// Foreign, if set, names the lock service outside fencegate whose
	// tokens fence resource (a gateway route's token_source), "" if none.
	// Such a lease is refused before a token is drawn: its token would be
	// a second number sequence, unordered with the first, on one fence.
	Foreign func(resource string) string
	// Logger receives one line per store failure and debug lines per
	// operation. Nil: slog.Default().
	Logger *slog.Logger
	// Releases reports releases made by other processes to Start. Nil:
	// the Backend, if it implements ReleaseWatcher (set it explicitly when
	// Backend is a wrapper, e.g. for tracing, that hides the method).
	Releases ReleaseWatcher

	mu      sync.Mutex
	waiters map[string]chan struct{} // closed to wake every waiter of a resource
	stop    context.CancelFunc
	done    chan struct{}
}

func (s *Service) log() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// Defaults of Service's limits (and of the coordinator's configuration).
const (
	DefaultLeaseTTL = 30 * time.Second
	DefaultMaxTTL   = 10 * time.Minute
	DefaultMaxWait  = time.Minute
	// AnswerMargin is how long an acquire's answer may take beyond the
	// time it waits for the lease (the coordinator's write timeout, a
	// client's request timeout).
	AnswerMargin = 30 * time.Second
)

func (s *Service) defaultTTL() time.Duration { return orDefault(s.DefaultTTL, DefaultLeaseTTL) }
func (s *Service) maxTTL() time.Duration     { return orDefault(s.MaxTTL, DefaultMaxTTL) }
func (s *Service) maxWait() time.Duration    { return orDefault(s.MaxWait, DefaultMaxWait) }

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Start begins receiving releases made by other processes when the backend
// can report them (ReleaseWatcher). Without it, waiters of this process are
// still woken by this process's releases and by the holder's expiry.
func (s *Service) Start() {
	w := s.Releases
	if w == nil {
		var ok bool
		if w, ok = s.Backend.(ReleaseWatcher); !ok {
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.stop, s.done = cancel, make(chan struct{})
	s.mu.Unlock()
	go func() {
		defer close(s.done)
		err := w.WatchReleases(ctx, s.wake)
		if err != nil && ctx.Err() == nil {
			s.log().Error("lease release notifications stopped; waiters fall back to lease expiry", "err", err)
		}
	}()
}

// Close stops what Start started. It is safe without Start.
func (s *Service) Close() error {
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return nil
}

// subscribe returns a channel closed at the next release of resource. It
// is taken before the acquisition attempt, so a release committed after the
// attempt read the record cannot be missed.
func (s *Service) subscribe(resource string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiters == nil {
		s.waiters = make(map[string]chan struct{})
	}
	ch, ok := s.waiters[resource]
	if !ok {
		ch = make(chan struct{})
		s.waiters[resource] = ch
	}
	return ch
}

// wake wakes every waiter of resource, or of every resource for "".
func (s *Service) wake(resource string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if resource == "" {
		for r, ch := range s.waiters {
			close(ch)
			delete(s.waiters, r)
		}
		return
	}
	if ch, ok := s.waiters[resource]; ok {
		close(ch)
		delete(s.waiters, resource)
	}
}

// AcquireRequest is the body of POST /v1/leases/acquire.
type AcquireRequest struct {
	Resource string   `json:"resource"`
	Owner    string   `json:"owner"`
	TTL      Duration `json:"ttl,omitzero"`
	// Wait is how long to wait for a held lease; zero answers lease_held
	// at once.
	Wait Duration `json:"wait,omitzero"`
}

// Acquire takes the lease, waiting up to req.Wait for a held one. Refusals
// are *fencegate.Error: lease_held (with the holder and its expiry),
// invalid_request, or fence_unavailable when the store cannot be reached.
func (s *Service) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	ttl := time.Duration(req.TTL)
	if ttl == 0 {
		ttl = s.defaultTTL()
	}
	wait := time.Duration(req.Wait)
	if err := s.validate(&req.Resource, req.Owner, -1, ttl); err != nil {
		return Lease{}, err
	}
	if wait < 0 || wait > s.maxWait() {
		return Lease{}, invalid("wait must be between 0 and %v, got %v", s.maxWait(), wait)
	}
	if s.Foreign != nil {
		if src := s.Foreign(req.Resource); src != "" {
			return Lease{}, invalid("%s takes its fencing tokens from %s (a route's token_source), not from this coordinator", req.Resource, src)
		}
	}
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		woken := s.subscribe(req.Resource)
		l, fresh, err := s.Backend.Acquire(ctx, req.Resource, req.Owner, ttl)
		switch {
		case err == nil:
			if fresh && s.OnIssue != nil {
				if err := s.OnIssue(ctx, req.Resource, l.Token, req.Owner); err != nil {
					s.undoIssue(ctx, l)
					s.log().Error("token issued but OnIssue failed; lease released", "resource", req.Resource, "owner", req.Owner, "token", l.Token, "err", err)
					return Lease{}, unavailable(req.Resource, fmt.Errorf("on issue: %w", err))
				}
			}
			s.log().Debug("lease acquired", "resource", req.Resource, "owner", req.Owner, "token", l.Token, "fresh", fresh)
			return l, nil
		case errors.Is(err, &fencegate.Error{Code: fencegate.CodeStoreRegressed}):
			// The store went back: its refusal says why and how to recover.
			return Lease{}, err
		case !errors.Is(err, ErrHeld):
			s.log().Warn("acquire failed: lease store unavailable", "resource", req.Resource, "owner", req.Owner, "err", err)
			return Lease{}, unavailable(req.Resource, err)
		case deadline == nil:
			return Lease{}, heldError(l)
		}
		// Sleep until a release, the holder's expiry (by the store's
		// clock, plus a little so the retry finds it expired), the end of
		// the wait, or the caller giving up. No polling in between.
		expiry := time.NewTimer(max(l.Remaining, 0) + 2*time.Millisecond)
		select {
		case <-woken:
		case <-expiry.C:
		case <-deadline:
			expiry.Stop()
			return Lease{}, heldError(l)
		case <-ctx.Done():
			expiry.Stop()
			return Lease{}, fmt.Errorf("wait for lease on %s: %w", req.Resource, ctx.Err())
		}
		expiry.Stop()
	}
}

// undoIssue releases a lease whose OnIssue failed, so it does not block
// others until its expiry. Best effort: if this fails too, it expires.
func (s *Service) undoIssue(ctx context.Context, l Lease) {
	ok, err := s.Backend.Release(context.WithoutCancel(ctx), l.Resource, l.Owner, l.Token)
	if err == nil && ok {
		s.wake(l.Resource)
	}
}

// RenewRequest is the body of POST /v1/leases/renew and /release.
type RenewRequest struct {
	Resource string   `json:"resource"`
	Owner    string   `json:"owner"`
	Token    int64    `json:"token"`
	TTL      Duration `json:"ttl,omitzero"` // renew only; zero: the default
}

// Renew extends the named lease; lease_lost if it is not current and live.
func (s *Service) Renew(ctx context.Context, req RenewRequest) (Lease, error) {
	ttl := time.Duration(req.TTL)
	if ttl == 0 {
		ttl = s.defaultTTL()
	}
	if req.Token <= 0 {
		return Lease{}, invalid("token must be a positive integer")
	}
	if err := s.validate(&req.Resource, req.Owner, req.Token, ttl); err != nil {
		return Lease{}, err
	}
	l, err := s.Backend.Renew(ctx, req.Resource, req.Owner, req.Token, ttl)
	switch {
	case errors.Is(err, ErrLost):
		return Lease{}, lostError(req.Resource, req.Owner, req.Token)
	case err != nil:
		s.log().Warn("renew failed: lease store unavailable", "resource", req.Resource, "owner", req.Owner, "token", req.Token, "err", err)
		return Lease{}, unavailable(req.Resource, err)
	}
	return l, nil
}

// Release ends the named lease if it is current and live; it is idempotent.
func (s *Service) Release(ctx context.Context, req RenewRequest) (bool, error) {
	if req.Token <= 0 {
		return false, invalid("token must be a positive integer")
	}
	if err := s.validate(&req.Resource, req.Owner, req.Token, 0); err != nil {
		return false, err
	}
	ok, err := s.Backend.Release(ctx, req.Resource, req.Owner, req.Token)
	if err != nil {
		s.log().Warn("release failed: lease store unavailable", "resource", req.Resource, "owner", req.Owner, "token", req.Token, "err", err)
		return false, unavailable(req.Resource, err)
	}
	if ok {
		s.wake(req.Resource)
	}
	s.log().Debug("lease release", "resource", req.Resource, "owner", req.Owner, "token", req.Token, "released", ok)
	return ok, nil
}

// Show returns the current record of resource.
func (s *Service) Show(ctx context.Context, resource string) (Lease, error) {
	if err := validResource(&resource); err != nil {
		return Lease{}, err
	}
	l, err := s.Backend.Lease(ctx, resource)
	if err != nil {
		return Lease{}, unavailable(resource, err)
	}
	l.Resource = resource
	return l, nil
}

// validate checks names, token (-1: not part of the request) and ttl (0:
// not part of the request), and canonicalizes *resource.
func (s *Service) validate(resource *string, owner string, token int64, ttl time.Duration) error {
	if err := validResource(resource); err != nil {
		return err
	}
	if err := validName("owner", owner, MaxOwnerBytes); err != nil {
		return err
	}
	if token == 0 || token < -1 {
		return invalid("token must be a positive integer")
	}
	if ttl != 0 && (ttl < time.Millisecond || ttl > s.maxTTL()) {
		return invalid("ttl must be between 1ms and %v, got %v", s.maxTTL(), ttl)
	}
	return nil
}

// validResource checks a lease's resource and replaces it with its
// canonical spelling, the one the gateway derives from requests
// (resource.CanonicalName): "/orders/22" and "/orders//22" are one lease,
// as they are one fence, and names the gateway refuses ("..", control
// characters) are invalid_request.
func validResource(name *string) error {
	if err := validName("resource", *name, MaxResourceBytes); err != nil {
		return err
	}
	c, err := resource.CanonicalName(*name)
	if err != nil {
		return invalid("resource %q: %v", clip(*name), err)
	}
	*name = c
	return nil
}

// clip bounds client input echoed in a refusal.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

func validName(field, v string, maxBytes int) error {
	switch {
	case v == "":
		return invalid("%s is required", field)
	case len(v) > maxBytes:
		return invalid("%s is longer than %d bytes", field, maxBytes)
	case !utf8.ValidString(v):
		return invalid("%s is not valid UTF-8", field)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return invalid("%s contains a control character", field)
		}
	}
	return nil
}

func invalid(format string, args ...any) *fencegate.Error {
	return fencegate.Errorf(fencegate.CodeInvalidRequest, format, args...)
}

func heldError(l Lease) *fencegate.Error {
	exp := l.ExpiresAt
	return &fencegate.Error{
		Code:      fencegate.CodeLeaseHeld,
		Message:   fmt.Sprintf("lease on %s is held by %s until %s", l.Resource, l.Owner, exp.Format(time.RFC3339Nano)),
		Resource:  l.Resource,
		Owner:     l.Owner,
		ExpiresAt: &exp,
		Err:       ErrHeld,
	}
}

func lostError(resource, owner string, token int64) *fencegate.Error {
	return &fencegate.Error{
		Code:     fencegate.CodeLeaseLost,
		Message:  fmt.Sprintf("lease on %s with token %d of %s is not current: it expired, was released or a newer lease was acquired", resource, token, owner),
		Resource: resource,
		Owner:    owner,
		Token:    token,
		Err:      ErrLost,
	}
}

// unavailable is the answer when the store cannot be reached: 503, retry.
// It uses the fence_unavailable code: the coordinator's store is the fence's.
func unavailable(resource string, err error) *fencegate.Error {
	return &fencegate.Error{
		Code:       fencegate.CodeFenceUnavailable,
		Message:    "the lease store is unavailable; retry (a retried acquire by the same owner is safe)",
		Resource:   resource,
		RetryAfter: time.Second,
		Err:        err,
	}
}
