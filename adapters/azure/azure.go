// Package azure is fencegate's Azure Blob Storage upstream adapter:
// blob-level fencing in front of the Blob service's REST API (or an
// emulator of it, such as Azurite).
//
// Workers keep the official clients (azblob for Go with
// coordinator/client/azblobfence, @azure/storage-blob for JavaScript, ...)
// and point their service URL at the gateway. They sign with Shared Key
// credentials of their own (an account name and key the route lists in
// azure.clients), which the gateway verifies; the gateway signs its
// forwards with the store account's key (or appends its SAS), which
// workers never hold. Every blob write is fenced per blob
// ({container}/{blob}): Put Blob, Put Block and Put Block List (the commit
// is the effect: a commit under a token older than the blob's fence is
// refused, and a staging under an older token is refused once a newer
// token wrote), Copy Blob and Put Blob From URL (the destination), Delete
// Blob, Set Blob Metadata, properties, tags, tier, snapshots and leases.
// Reads pass.
//
// With `precondition: etag` the gateway makes every write conditional on
// the ETag it last wrote (If-Match, or If-None-Match: * for a blob it
// knows absent), so a request already handed to the store but delayed
// cannot overwrite a newer owner's version. The bookkeeping is package
// precondition's.
package azure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/precondition"
)

// Upstream forwards Blob service requests. It implements gateway.Upstream,
// gateway.Inspector, gateway.ErrorWriter and gateway.ObjectNamer.
type Upstream struct {
	*objectstore.Core[state]
	endpoint    *url.URL
	cred        *sharedKey // nil: sas
	sas         url.Values
	clients     map[string]*sharedKey
	stampHeader string      // "" unless stamping
	stampKey    string      // the metadata name of the stamp (stamping or not)
	leases      *leaseGuard // nil unless lease_guard
	transport   http.RoundTripper
	now         func() time.Time
	log         *slog.Logger
}

// Client is a worker's Shared Key credential.
type Client struct {
	AccountName string
	AccountKey  string // base64, as the portal shows it
}

// Options configure New.
type Options struct {
	// Spec: the Endpoint is the store account's blob service URL,
	// https://ACCOUNT.blob.core.windows.net, or an emulator's
	// http://127.0.0.1:10000/devstoreaccount1; Precondition compares
	// ETags and needs {container} and {blob}; StampKey is a metadata name
	// (empty: DefaultStampKey). The Transport defaults to
	// relay.NewTransport(nil).
	objectstore.Spec
	// AccountName and AccountKey are the store account's Shared Key, which
	// the gateway signs its forwards with.
	AccountName, AccountKey string
	// SAS, if set instead of a key, is a shared access signature (a query
	// string) the gateway appends to every forward.
	SAS string
	// Clients are the workers' own Shared Key credentials; a request not
	// signed with one of them is refused.
	Clients []Client
	// LeaseGuard makes the gateway hold an infinite blob lease on every
	// blob it writes, with a lease id derived from LeaseSecret, so that
	// writes around the gateway without the lease id are refused by the
	// store.
	LeaseGuard  bool
	LeaseSecret []byte
}

// DefaultStampKey is the metadata name of `stamp: true` (sent as
// x-ms-meta-fencing_token: Azure metadata names are C# identifiers).
const DefaultStampKey = "fencing_token"

// New returns the upstream of an Azure route.
func New(opts Options) (*Upstream, error) {
	e, err := objectstore.ParseEndpoint("azure.endpoint", opts.Endpoint, true)
	if err != nil {
		return nil, err
	}
	e.RawPath = ""
	u := &Upstream{
		endpoint:  e,
		transport: opts.Transport, now: opts.Clock(), log: opts.Log(),
		clients: map[string]*sharedKey{},
	}
	switch {
	case opts.AccountKey != "" && opts.SAS != "":
		return nil, errors.New("azure: set account_key or sas, not both")
	case opts.AccountKey != "":
		if u.cred, err = newSharedKey(opts.AccountName, opts.AccountKey); err != nil {
			return nil, fmt.Errorf("azure.account_name, azure.account_key: %w", err)
		}
	case opts.SAS != "":
		if u.sas, err = url.ParseQuery(strings.TrimPrefix(opts.SAS, "?")); err != nil || u.sas.Get("sig") == "" {
			return nil, errors.New("azure.sas: not a shared access signature (a query string with sig)")
		}
	default:
		return nil, errors.New("azure: the gateway's own credentials are required (account_key or sas)")
	}
	if len(opts.Clients) == 0 {
		return nil, errors.New("azure.clients: the workers' own credentials are required (workers never use the gateway's)")
	}
	for i, c := range opts.Clients {
		cred, err := newSharedKey(c.AccountName, c.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("azure.clients[%d]: %w", i, err)
		}
		if opts.AccountName != "" && c.AccountName == opts.AccountName {
			// A worker holding the store account's name could be told its
			// key; one name, one identity.
			return nil, fmt.Errorf("azure.clients[%d]: a worker's account name must differ from the store account's", i)
		}
		u.clients[c.AccountName] = cred
	}
	if u.transport == nil {
		u.transport = relay.NewTransport(nil)
	}
	oneBlob := strings.Contains(opts.Resource, "{container}") && strings.Contains(opts.Resource, "{blob}")
	u.stampKey = cmp.Or(opts.StampKey, DefaultStampKey)
	if opts.Stamp {
		u.stampHeader = "X-Ms-Meta-" + u.stampKey
	}
	tracker, err := opts.Tracker("etag", "Azure", "container", "blob")
	if err != nil {
		return nil, err
	}
	if opts.LeaseGuard {
		if !oneBlob {
			return nil, errors.New("lease_guard needs a resource template naming one blob, with {container} and {blob}")
		}
		if len(opts.LeaseSecret) == 0 {
			return nil, errors.New("lease_guard needs a lease secret")
		}
		u.leases = &leaseGuard{secret: opts.LeaseSecret}
	}
	// azblob sends the "/" of a blob name as %2F (gateway.ObjectNamer).
	u.Core = objectstore.New[state](dialect{u}, objectstore.Options{Tracker: tracker, EncodedSlashNames: true})
	return u, nil
}

// dialect is the Blob service's REST API behind the object-store core.
type dialect struct{ *Upstream }

// state is what Inspect learnt of a request (its target) and what its
// forward needs besides.
type state struct {
	target
	leaseID string // the gateway's lease id to send ("" none)
	stamp   bool
	copySrc *objectstore.CopySource // a stamped copy's source (copystamp.go)
}

// forward is one admitted request on its way to the store.
type forward = objectstore.Forward[state]

// Inspect verifies the worker's Shared Key signature (or account SAS) and
// names the blob (or container) the request writes.
func (d dialect) Inspect(r *http.Request, token int64) (gateway.Inspection, *state, error) {
	u := d.Upstream
	t, ref := parseTarget(r)
	if ref != nil {
		return gateway.Inspection{}, nil, ref
	}
	var (
		owner string
		err   error
	)
	q := r.URL.Query()
	switch {
	case hasSAS(q) && r.Header.Get("Authorization") != "":
		err = errors.New("a request carries a Shared Key signature or a SAS, not both")
	case hasSAS(q):
		owner, err = verifySAS(r, q, t, u.clients, u.now())
		t.workerSAS = err == nil
	default:
		owner, err = verify(r, u.clients, u.now())
	}
	if err != nil {
		// Which check failed is told; no key or signature is.
		return gateway.Inspection{}, nil, &fencegate.Error{Code: fencegate.CodeForbidden,
			Message: "the request is not signed with Shared Key credentials or an account SAS of one of this route's azure.clients: " + err.Error()}
	}
	switch {
	case t.op == opUnsupported:
		return gateway.Inspection{}, nil, httprefusal.WithStatus(http.StatusNotImplemented, &fencegate.Error{Code: fencegate.CodeInvalidRequest, Message: t.why})
	case t.op == opLease && u.leases != nil:
		return gateway.Inspection{}, nil, &fencegate.Error{Code: fencegate.CodeForbidden,
			Message: "blob leases are the gateway's on a route with lease_guard: true"}
	}
	insp := gateway.Inspection{Owner: owner}
	if t.container != "" {
		insp.Vars = vars(t.container, t.blob)
		// The container is the collection of its blobs: a write of the
		// container itself is fenced on the container's key,
		// hierarchically with its blobs' keys.
		insp.Collection = map[string]string{"container": t.container}
		insp.WritesCollection = t.op == opContainer
	}
	u.copySourceReads(r, &insp)
	return insp, &state{target: t}, nil
}

func vars(container, blob string) map[string]string {
	return objectstore.Vars("container", container, "blob", blob)
}

// Prepare decides whether the forward carries the gateway's stamp, and
// reads the source of a stamped copy that takes its metadata.
func (d dialect) Prepare(f *forward) error {
	if f.Token > 0 && d.stampHeader != "" {
		f.State.stamp = stamped(f.In.Method, f.State.target)
		if f.State.stamp && copiesSourceMetadata(f.In, f.State.target) {
			var err error
			f.State.copySrc, err = d.readCopySource(f.In.Context(), f.In)
			return err
		}
	}
	return nil
}

// Guard takes (or keeps) the gateway's lease on the blob a write changes
// (lease_guard).
func (d dialect) Guard(f *forward) error {
	if d.leases == nil || f.State.blob == "" {
		return nil
	}
	id, err := d.leases.before(f.In.Context(), d.Upstream, f)
	f.State.leaseID = id
	return err
}

// stamped reports whether a write sets the blob's metadata, so that the
// gateway's stamp goes with it: Put Blob, Put Block List, Copy Blob (whose
// metadata, given, replaces the source's) and Set Blob Metadata.
func stamped(method string, t target) bool {
	switch t.op {
	case opBlockList, opCopy:
		return true
	case opBlob:
		return method == http.MethodPut && (t.comp == "" || t.comp == "metadata")
	}
	return false
}

// rewrite prepares the outbound request: the endpoint's address and the
// canonical path, the worker's credentials and token removed (the
// transport signs with the gateway's), a copy source on the gateway
// pointed at the store, the gateway's precondition, stamp and lease id.
func (d dialect) Rewrite(pr *httputil.ProxyRequest, f *forward) {
	u := d.Upstream
	out := pr.Out
	out.URL.Scheme, out.URL.Host = u.endpoint.Scheme, u.endpoint.Host
	out.URL.RawPath = u.endpoint.EscapedPath() + f.State.path
	out.URL.Path, _ = url.PathUnescape(out.URL.RawPath)
	if f.State.workerSAS {
		// The worker's SAS is signed with its own key, which the store
		// does not know; the gateway's credentials authorize the forward.
		out.URL.RawQuery = withoutSAS(out.URL.RawQuery)
	}
	if u.sas != nil {
		q := out.URL.Query()
		for k, vs := range u.sas {
			q[k] = vs
		}
		out.URL.RawQuery = q.Encode()
	}
	out.Host = ""
	out.Header.Del("Authorization")
	if src := out.Header.Get("X-Ms-Copy-Source"); src != "" {
		out.Header.Set("X-Ms-Copy-Source", u.copySource(pr.In, src))
	}
	if f.Version != nil {
		f.Version.Apply(out.Header)
	}
	if f.State.copySrc != nil {
		// The source's metadata, on the source's version (the stamp is set
		// below).
		sourceConditions.SendSource(out.Header, f.State.copySrc, metaPrefix, nil)
	}
	if f.State.stamp {
		// Set, not merged: a worker's own value would forge the stamp
		// `fence rebuild` trusts.
		for k := range out.Header {
			if strings.EqualFold(k, u.stampHeader) {
				delete(out.Header, k)
			}
		}
		out.Header.Set(u.stampHeader, fmt.Sprint(f.Token))
	}
	if f.State.leaseID != "" {
		out.Header.Set("X-Ms-Lease-Id", f.State.leaseID)
	}
}

// copySource points a copy source named on the gateway's address (the
// worker's service URL) at the store. Sources elsewhere are the store's to
// read as given: the copy writes only the destination, which is fenced.
func (u *Upstream) copySource(in *http.Request, src string) string {
	s, err := url.Parse(src)
	if err != nil || !strings.EqualFold(s.Host, in.Host) {
		return src
	}
	container, blob, _, err := parsePath(s.EscapedPath())
	if err != nil || container == "" || len(blob) == 0 {
		return src
	}
	out := *u.endpoint
	out.RawPath = u.endpoint.EscapedPath() + escapeSegments(append([]string{container}, blob...))
	out.Path, _ = url.PathUnescape(out.RawPath)
	out.RawQuery = s.RawQuery
	return out.String()
}

// send signs a request with the gateway's credentials and sends it.
func (u *Upstream) send(req *http.Request) (*http.Response, error) {
	if u.cred != nil {
		if err := sign(req, u.cred, u.now()); err != nil {
			return nil, fmt.Errorf("azure: sign: %w", err)
		}
	}
	return u.transport.RoundTrip(req)
}

// RoundTrip sends a forward signed with the gateway's credentials and
// takes the lease of a blob the write created (lease_guard).
func (d dialect) RoundTrip(req *http.Request, f *forward) (*http.Response, error) {
	resp, err := d.send(req)
	if err == nil && d.leases != nil && f.State.blob != "" {
		d.leases.after(req.Context(), d.Upstream, f, resp)
	}
	return resp, err
}

// Answer reads the status and the ETag of a write's answer.
func (d dialect) Answer(f *forward, resp *http.Response) (int, string, error) {
	status := resp.StatusCode
	if status == http.StatusConflict && f.Version.IfNoneMatch && resp.Header.Get("X-Ms-Error-Code") == "BlobAlreadyExists" {
		// The store answers If-None-Match: * on a blob that exists with
		// 409 BlobAlreadyExists, not 412: the gateway's condition failed
		// (the worker asked for none).
		status = http.StatusPreconditionFailed
	}
	return status, resp.Header.Get("ETag"), nil
}

// Tracks names the ETag bookkeeping of a write (package precondition).
func (d dialect) Tracks(f *forward) (precondition.Kind, bool, bool) {
	t, r := f.State, f.In
	kind, conditional := precondition.Replace, true
	switch t.op {
	case opBlock:
		// Staging a block leaves the blob and its ETag as they are.
		return 0, false, false
	case opBlockList:
	case opCopy:
		// The copy's ETag may be the destination's before an
		// asynchronous copy completes: the next write re-learns it.
		kind = precondition.Opaque
	case opBlob:
		switch {
		case r.Method == http.MethodDelete && t.comp == "":
			kind = precondition.Delete
		case r.Method == http.MethodPut && (t.comp == "" || t.comp == "metadata" || t.comp == "properties"):
		default:
			// Tags, tier, snapshots, ...: tracked, not made conditional
			// (not every one takes If-Match); the next write re-learns
			// the ETag.
			kind, conditional = precondition.Opaque, false
		}
	case opLease:
		kind, conditional = precondition.Opaque, false
	default:
		return 0, false, false
	}
	return kind, conditional, true
}

// Version asks the store for the ETag of the write's blob.
func (d dialect) Version(ctx context.Context, f *forward) (string, error) {
	return d.etag(ctx, f.State.container, f.State.blob)
}

// blobURL is the store's URL of a blob.
func (u *Upstream) blobURL(container, blob string) *url.URL {
	out := *u.endpoint
	out.RawPath = u.endpoint.EscapedPath() + escapeSegments(append([]string{container}, strings.Split(blob, "/")...))
	out.Path, _ = url.PathUnescape(out.RawPath)
	if u.sas != nil {
		out.RawQuery = u.sas.Encode()
	}
	return &out
}

// do sends a request of the gateway's own to the store, signed.
func (u *Upstream) do(ctx context.Context, method string, target *url.URL, h http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, target.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("X-Ms-Version", apiVersion)
	return u.send(req)
}

// apiVersion is the x-ms-version of the gateway's own requests.
const apiVersion = "2021-12-02"

// etag asks the store for a blob's ETag ("" if it does not exist).
func (u *Upstream) etag(ctx context.Context, container, blob string) (string, error) {
	resp, err := u.do(ctx, http.MethodHead, u.blobURL(container, blob), nil)
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	return objectstore.HeadVersion(resp, container+"/"+blob, "ETag")
}
