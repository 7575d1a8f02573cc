package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
)

// Lease is a held lease renewed in the background until Close or loss.
type Lease struct {
	Resource string
	Owner    string
	Token    int64

	c      *Client
	ttl    time.Duration
	header string
	parent context.Context

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time // local clock: the lease is surely live before it

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Acquire takes the lease on resource, waiting up to opts.Wait for a held
// one, and renews it in the background at a third of its TTL. Its Context
// is a child of ctx (cancel ctx to give the lease up along with the work);
// call Close when done to release it.
//
// The lease is considered alive only until its TTL, counted on this
// process's clock from before the request that granted or last renewed it
// was sent, minus a margin: the coordinator's expiry is later than that, so
// the context is cancelled before anyone else can be handed the lease.
func (c *Client) Acquire(ctx context.Context, resource string, opts Options) (*Lease, error) {
	sent := time.Now()
	r, err := c.AcquireOnce(ctx, resource, opts)
	if err != nil {
		return nil, err
	}
	ttl := opts.TTL
	if ttl <= 0 {
		ttl = time.Duration(r.TTL)
	}
	header := opts.TokenHeader
	if header == "" {
		header = fencegate.DefaultTokenHeader
	}
	l := &Lease{
		Resource: r.Resource, Owner: r.Owner, Token: r.Token,
		c: c, ttl: ttl, header: header, parent: ctx,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	l.deadline = safeDeadline(sent, time.Duration(r.TTL))
	go l.renew()
	return l, nil
}

// safeDeadline is when a lease granted for remaining at some point after
// sent must be considered gone, with a margin for clock rate differences
// and scheduling.
func safeDeadline(sent time.Time, remaining time.Duration) time.Time {
	margin := min(remaining/10, 5*time.Second)
	return sent.Add(remaining - margin)
}

// Context is cancelled the moment the lease is lost: lease_lost from the
// coordinator, no successful renewal before expiry, a stale_fencing_token
// answer through RoundTripper, Close, or the parent context ending. Bind
// every piece of work done under the lease to it. context.Cause tells why.
func (l *Lease) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lease is held, then why it ended (ErrLost wrapped
// in a *fencegate.Error, ErrExpired, a *StaleError, ErrClosed, or the
// parent context's cause).
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

func (l *Lease) renew() {
	defer close(l.done)
	interval := max(l.ttl/3, time.Millisecond)
	retry := max(min(l.ttl/10, time.Second), time.Millisecond)
	next := time.NewTimer(interval)
	defer next.Stop()
	l.mu.Lock()
	expiry := time.NewTimer(time.Until(l.deadline))
	l.mu.Unlock()
	defer expiry.Stop()
	type result struct {
		sent      time.Time
		remaining time.Duration
		err       error
	}
	results := make(chan result, 1)
	var stopCall context.CancelFunc = func() {}
	defer func() { stopCall() }()
	for {
		select {
		case <-l.stop:
			return
		case <-l.ctx.Done():
			return
		case <-expiry.C:
			l.cancel(ErrExpired)
			return
		case <-next.C:
			// The call runs beside this loop, so that the expiry timer
			// fires on time even if the call hangs (a blocked network).
			l.mu.Lock()
			callCtx, cancel := context.WithDeadline(l.ctx, l.deadline)
			l.mu.Unlock()
			stopCall = cancel
			go func() {
				sent := time.Now()
				r, err := l.c.Renew(callCtx, l.Resource, l.Token, l.ttl)
				results <- result{sent, time.Duration(r.TTL), err}
			}()
		case r := <-results:
			stopCall()
			var fe *fencegate.Error
			switch {
			case r.err == nil:
				l.mu.Lock()
				l.deadline = safeDeadline(r.sent, r.remaining)
				expiry.Reset(time.Until(l.deadline))
				l.mu.Unlock()
				next.Reset(interval)
			case errors.As(r.err, &fe) && httprefusal.Status(fe)/100 == 4:
				// lease_lost, or a request the coordinator will never
				// accept: either way this lease cannot be kept.
				l.cancel(r.err)
				return
			default:
				// Unreachable or 503: try again soon, until expiry.
				next.Reset(retry)
			}
		}
	}
}

// Close cancels the lease's context, stops renewing and releases the lease
// so the next owner need not wait for its expiry. Releasing a lease that
// was lost changes nothing (only this exact record can be released), so it
// is tried anyway and its error reported only if the lease was still held.
// Close is safe to call more than once.
func (l *Lease) Close() error {
	var err error
	l.closeOnce.Do(func() {
		held := l.ctx.Err() == nil
		// Work under the lease stops before the lease is given up.
		l.cancel(ErrClosed)
		close(l.stop)
		<-l.done
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.parent), 5*time.Second)
		defer cancel()
		if _, rerr := l.c.Release(ctx, l.Resource, l.Token); rerr != nil && held {
			err = fmt.Errorf("release lease on %s: %w", l.Resource, rerr)
		}
	})
	return err
}

// RoundTripper returns a transport that sends the lease's token in the
// Fencing-Token header (Options.TokenHeader) over next (nil:
// http.DefaultTransport). Once the lease is lost it refuses to send at all.
// A gateway's stale_fencing_token answer (409) is returned as a *StaleError
// (http.Client wraps it in a *url.Error; use errors.As) and ends the lease:
// a newer owner exists.
func (l *Lease) RoundTripper(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &tokenTransport{l: l, next: next}
}

type tokenTransport struct {
	l    *Lease
	next http.RoundTripper
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	l := t.l
	if l.ctx.Err() != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("lease on %s with token %d is no longer held: %w", l.Resource, l.Token, context.Cause(l.ctx))
	}
	// A RoundTripper must not modify the request it was given.
	out := req.Clone(req.Context())
	out.Header.Set(l.header, strconv.FormatInt(l.Token, 10))
	resp, err := t.next.RoundTrip(out)
	if err != nil || resp.StatusCode != http.StatusConflict {
		return resp, err
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, fencegate.MaxRefusalBody))
	fe := decodeError(resp, b)
	if rerr == nil && fe != nil && fe.Code == fencegate.CodeStaleToken {
		resp.Body.Close()
		se := &StaleError{Resource: fe.Resource, Token: fe.Token, Highest: fe.Highest, Route: fe.Route, Message: fe.Message}
		l.cancel(se)
		return nil, se
	}
	// Another conflict (e.g. the upstream's own): hand it back unread.
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	return resp, nil
}
