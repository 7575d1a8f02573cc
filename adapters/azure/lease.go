package azure

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
)

// leaseGuard holds an infinite blob lease on every blob the gateway
// writes (`lease_guard: true`): the store then refuses any write that
// does not name the lease id, which only the gateway knows. The id is
// derived from a secret and the blob's name, so it needs no bookkeeping
// and is the same in every gateway process sharing the secret.
//
// What it does not guard: a blob the gateway has not written yet (the
// lease is taken after its first write), and anyone holding the store
// account's key, who can break a lease.
type leaseGuard struct {
	secret []byte
}

// leaseID is the blob's lease id, a UUID (the store's format).
func (g *leaseGuard) leaseID(container, blob string) string {
	m := hmac.New(sha256.New, g.secret)
	m.Write([]byte(container + "/" + blob))
	s := m.Sum(nil)
	s[6] = s[6]&0x0f | 0x40 // version 4 layout, as the store expects
	s[8] = s[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16])
}

// before takes (or keeps) the gateway's lease on the blob a write is about
// to change and returns the lease id to send with it: "" when the blob
// does not exist yet (its first write creates it; after takes the lease).
// A blob leased by anyone else is refused: a write around the gateway
// holds it.
func (g *leaseGuard) before(ctx context.Context, u *Upstream, f *forward) (string, error) {
	id := g.leaseID(f.State.target.container, f.State.target.blob)
	status, code, err := g.acquire(ctx, u, f.State.target, id)
	if err != nil {
		return "", fencegate.Unavailable(f.Resource, fmt.Errorf("lease_guard: acquire: %w", err))
	}
	switch {
	case status == http.StatusCreated || status == http.StatusOK:
		return id, nil
	case status == http.StatusNotFound:
		return "", nil
	case status == http.StatusConflict:
		return "", httprefusal.WithStatus(http.StatusConflict, &fencegate.Error{Code: fencegate.CodeForbidden, Resource: f.Resource,
			Message: "lease_guard: the blob is leased by someone other than the gateway (" + code + "): a lease taken around the gateway must be broken by the account's owner"})
	}
	return "", &fencegate.Error{Code: fencegate.CodeUpstreamUnavailable, Resource: f.Resource,
		Message: fmt.Sprintf("lease_guard: the store answered %d (%s) to the gateway's lease", status, code)}
}

// after takes the lease on a blob the write created.
func (g *leaseGuard) after(ctx context.Context, u *Upstream, f *forward, resp *http.Response) {
	if f.State.leaseID != "" || resp.StatusCode/100 != 2 || f.In.Method == http.MethodDelete || f.State.target.op == opBlock {
		return
	}
	id := g.leaseID(f.State.target.container, f.State.target.blob)
	if status, code, err := g.acquire(context.WithoutCancel(ctx), u, f.State.target, id); err != nil || status/100 != 2 {
		u.log.Warn("lease_guard: the gateway could not take the lease of a blob it created", "resource", f.Resource, "status", status, "code", code, "err", err)
	}
}

func (g *leaseGuard) acquire(ctx context.Context, u *Upstream, t target, id string) (int, string, error) {
	target := u.blobURL(t.container, t.blob)
	q := target.Query()
	q.Set("comp", "lease")
	target.RawQuery = q.Encode()
	resp, err := u.do(ctx, http.MethodPut, target, http.Header{
		"X-Ms-Lease-Action":      {"acquire"},
		"X-Ms-Lease-Duration":    {"-1"},
		"X-Ms-Proposed-Lease-Id": {id},
	})
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Ms-Error-Code"), nil
}
