// Package client is the worker side of fencegate's lease coordinator: it
// acquires a lease, renews it in the background, cancels a context the
// moment the lease is lost or cannot be renewed before it expires, and adds
// the lease's fencing token to the worker's writes.
//
//	c := &client.Client{URL: "http://127.0.0.1:8081", Owner: "worker-1"}
//	lease, err := c.Acquire(ctx, "/orders/7", client.Options{TTL: 30 * time.Second})
//	if err != nil { ... }
//	defer lease.Close()
//	hc := &http.Client{Transport: lease.RoundTripper(nil)}
//	resp, err := hc.Do(req.WithContext(lease.Context()))
//	var stale *client.StaleError
//	if errors.As(err, &stale) { /* a newer owner exists: stop, do not retry */ }
//
// A lease is never a guarantee that no one else acts on the resource (a
// pause can outlast it); the token is what makes the resource refuse a
// late write, which is why every write must carry it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/httprefusal"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// Errors a lease's context is cancelled with (context.Cause), besides a
// *StaleError and a *fencegate.Error with code lease_lost.
var (
	// ErrHeld: another owner holds the lease (Acquire without enough Wait).
	// The error is a *fencegate.Error naming the holder and its expiry.
	ErrHeld = coordinator.ErrHeld
	// ErrLost: the coordinator answered lease_lost: the lease expired, was
	// released, or a newer one was acquired.
	ErrLost = coordinator.ErrLost
	// ErrExpired: the lease could not be renewed before it expired (the
	// coordinator was unreachable or failing); it must be treated as lost.
	ErrExpired = errors.New("lease could not be renewed before it expired")
	// ErrClosed: Close was called.
	ErrClosed = errors.New("lease closed")
)

// Client talks to a coordinator's HTTP API.
type Client struct {
	// URL is the coordinator's base URL, e.g. http://127.0.0.1:8081.
	URL string
	// APIKey, if set, is sent as Authorization: Bearer (coordinator.auth).
	APIKey string
	// Owner names this worker in its leases. Empty: hostname-pid.
	Owner string
	// HTTPClient makes the calls. Nil: http.DefaultClient. Each call is
	// bounded by its context; a renewal by the lease's expiry.
	HTTPClient *http.Client
}

func (c *Client) owner() string {
	if c.Owner != "" {
		return c.Owner
	}
	h, _ := os.Hostname()
	return h + "-" + strconv.Itoa(os.Getpid())
}

func (c *Client) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return http.DefaultClient
}

// Options tune an acquisition.
type Options struct {
	// TTL is the lease time. Zero: the coordinator's default_ttl.
	TTL time.Duration
	// Wait is how long the coordinator waits for a held lease before
	// answering lease_held. Zero: answer at once.
	Wait time.Duration
	// TokenHeader is the header RoundTripper sets. Empty: Fencing-Token.
	TokenHeader string
}

// AcquireOnce makes one acquire call and returns the lease record without
// renewing it (fencegate lease acquire uses it). Refusals are
// *fencegate.Error; errors.Is(err, ErrHeld) tells a held lease.
func (c *Client) AcquireOnce(ctx context.Context, resource string, opts Options) (coordinator.LeaseResponse, error) {
	var out coordinator.LeaseResponse
	err := c.call(ctx, http.MethodPost, "/v1/leases/acquire", coordinator.AcquireRequest{
		Resource: resource, Owner: c.owner(), TTL: coordinator.Duration(opts.TTL), Wait: coordinator.Duration(opts.Wait),
	}, &out)
	return out, err
}

// Renew extends the lease (resource, Owner, token) by ttl (zero: the
// coordinator's default). errors.Is(err, ErrLost) when it is not current.
func (c *Client) Renew(ctx context.Context, resource string, token int64, ttl time.Duration) (coordinator.LeaseResponse, error) {
	var out coordinator.LeaseResponse
	err := c.call(ctx, http.MethodPost, "/v1/leases/renew", coordinator.RenewRequest{
		Resource: resource, Owner: c.owner(), Token: token, TTL: coordinator.Duration(ttl),
	}, &out)
	return out, err
}

// Release ends the lease (resource, Owner, token) if it is current and
// reports whether it did; releasing twice is harmless.
func (c *Client) Release(ctx context.Context, resource string, token int64) (bool, error) {
	var out coordinator.ReleaseResponse
	err := c.call(ctx, http.MethodPost, "/v1/leases/release", coordinator.RenewRequest{
		Resource: resource, Owner: c.owner(), Token: token,
	}, &out)
	return out.Released, err
}

// Show returns the current lease record of resource (Held false if none).
func (c *Client) Show(ctx context.Context, resource string) (coordinator.LeaseResponse, error) {
	var out coordinator.LeaseResponse
	err := c.call(ctx, http.MethodGet, "/v1/leases?resource="+url.QueryEscape(resource), nil, &out)
	return out, err
}

// call makes one API call. Refusals come back as *fencegate.Error whose Err
// is ErrHeld or ErrLost for those codes, so errors.Is works on them.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	// W3C trace context, so the coordinator's spans join the worker's trace
	// when the worker has set a propagator (the global one is a no-op
	// otherwise).
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return fmt.Errorf("coordinator %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("coordinator %s %s: %w", method, path, err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("coordinator %s %s: bad answer: %w", method, path, err)
		}
		return nil
	}
	fe := decodeError(resp, b)
	if fe == nil {
		return fmt.Errorf("coordinator %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	switch fe.Code {
	case fencegate.CodeLeaseHeld:
		fe.Err = ErrHeld
	case fencegate.CodeLeaseLost:
		fe.Err = ErrLost
	}
	// The refusal keeps the status it was answered with (httprefusal.Status),
	// which a proxy or a newer coordinator may have chosen.
	return httprefusal.WithStatus(resp.StatusCode, fe)
}

// decodeError returns the fencegate error body of resp, or nil if it has
// none (e.g. a proxy's HTML page).
func decodeError(resp *http.Response, b []byte) *fencegate.Error {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/json" {
		return nil
	}
	var fe fencegate.Error
	if json.Unmarshal(b, &fe) != nil || fe.Code == "" {
		return nil
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		fe.RetryAfter = time.Duration(s) * time.Second
	}
	return &fe
}

// StaleError is the gateway's stale_fencing_token refusal (409): a newer
// lease's token was already accepted for the resource. The write had no
// effect. It is a successful safety decision, not a failure to retry: the
// lease is lost, and the worker should stop the dependent work and leave
// the resource to its current owner.
type StaleError struct {
	Resource string
	Token    int64 // the token the write carried
	Highest  int64 // the newer token the gateway had accepted
	Route    string
	Message  string
}

func (e *StaleError) Error() string {
	return "stale_fencing_token: " + e.Message
}
