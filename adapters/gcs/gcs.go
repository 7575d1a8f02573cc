// Package gcs is fencegate's Google Cloud Storage upstream adapter:
// object-level fencing in front of GCS's JSON API (or an emulator of it,
// such as fake-gcs-server).
//
// Workers keep the official client (cloud.google.com/go/storage with
// option.WithEndpoint, or another language's) and point it at the gateway,
// with a bearer key of their own that the route's auth block verifies; the
// gateway talks to the store with its own credentials (a service account),
// which workers never hold. Every object write is fenced per object
// ({bucket}/{object}): simple, multipart and resumable uploads, compose,
// copy and rewrite (the destination), delete, metadata and ACL updates.
// Reads pass.
//
// A resumable upload's session URL is handed to the worker on the
// gateway's address, bound (by a MAC) to the object and the token that
// opened it: every request on the session is fenced with that object and
// that token, so a newer token's write supersedes the session as it does
// any older write.
//
// With `precondition: generation` the gateway makes every write
// conditional on the generation it last wrote (ifGenerationMatch, 0 for an
// object it knows absent), so a request already handed to the store but
// delayed cannot overwrite a newer owner's version. The bookkeeping is
// package precondition's, with generations in place of ETags.
package gcs

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/precondition"
)

// DefaultEndpoint is the store's JSON API address.
const DefaultEndpoint = "https://storage.googleapis.com"

// Scope is the OAuth scope the gateway's service account asks for.
const Scope = "https://www.googleapis.com/auth/devstorage.read_write"

// Upstream forwards GCS JSON API requests. It implements gateway.Upstream,
// gateway.Inspector, gateway.ErrorWriter and gateway.ObjectNamer.
type Upstream struct {
	*objectstore.Core[state]
	endpoint   *url.URL
	tokens     oauth2.TokenSource // nil: no credentials (emulator)
	sessionKey []byte
	stampKey   string                // "" unless stamping
	scanKey    string                // the stamp's key ScanStamps reads (stamping or not)
	tracker    *precondition.Tracker // nil in Writes' upstream, which has no core
	transport  http.RoundTripper
}

// Options configure New.
type Options struct {
	// Spec: an empty Endpoint is DefaultEndpoint; Precondition compares
	// generations (the Versions); StampKey is a custom metadata key
	// (empty: DefaultStampKey). The Transport defaults to NewTransport().
	objectstore.Spec
	// TokenSource gives the gateway's own credentials. Nil: none are sent
	// (an emulator).
	TokenSource oauth2.TokenSource
	// SessionKey binds resumable upload sessions to their object and
	// token. Empty: a random key (sessions then continue only through this
	// process).
	SessionKey []byte
}

// DefaultStampKey is the custom metadata key of `stamp: true`.
const DefaultStampKey = "fencing-token"

// Credentials returns the gateway's token source: from a service account
// key file, none (noAuth: an emulator), or Application Default
// Credentials.
func Credentials(ctx context.Context, file string, noAuth bool) (oauth2.TokenSource, error) {
	switch {
	case noAuth:
		return nil, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("gcs.credentials_file: %w", err)
		}
		// The type is checked: a key file must be a service account's, not
		// any credential configuration (which could name another identity
		// provider or a file to read).
		c, err := google.CredentialsFromJSONWithType(ctx, b, google.ServiceAccount, Scope)
		if err != nil {
			// The error may quote the file; it names no secret of it.
			return nil, fmt.Errorf("gcs.credentials_file: not a usable service account key: %w", err)
		}
		return c.TokenSource, nil
	}
	c, err := google.FindDefaultCredentials(ctx, Scope)
	if err != nil {
		return nil, fmt.Errorf("gcs: no credentials_file and no Application Default Credentials (no_auth: true for an emulator): %w", err)
	}
	return c.TokenSource, nil
}

// New returns the upstream of a GCS route.
func New(opts Options) (*Upstream, error) {
	e, err := objectstore.ParseEndpoint("gcs.endpoint", cmp.Or(opts.Endpoint, DefaultEndpoint), false)
	if err != nil {
		return nil, err
	}
	u := &Upstream{
		endpoint: e, tokens: opts.TokenSource,
		sessionKey: opts.SessionKey,
		transport:  opts.Transport,
	}
	if u.transport == nil {
		u.transport = NewTransport()
	}
	if len(u.sessionKey) == 0 {
		u.sessionKey = make([]byte, 32)
		rand.Read(u.sessionKey)
	}
	u.scanKey = cmp.Or(opts.StampKey, DefaultStampKey)
	if opts.Stamp {
		u.stampKey = u.scanKey
	}
	if u.tracker, err = opts.Tracker("generation", "GCS", "bucket", "object"); err != nil {
		return nil, err
	}
	// The JSON API names an object with one path segment, its "/" sent as
	// %2F (gateway.ObjectNamer).
	u.Core = objectstore.New[state](dialect{u}, objectstore.Options{Tracker: u.tracker, EncodedSlashNames: true,
		PinsVersion: func(r *http.Request) bool { return len(r.URL.Query()["ifGenerationMatch"]) > 0 }})
	return u, nil
}

// dialect is the GCS JSON API behind the object-store core.
type dialect struct{ *Upstream }

// state is what Inspect learnt of a request (its target) and what its
// forward needs besides.
type state struct {
	target
	// body, if set, replaces the request body (a stamped one), of length
	// bodyLen (-1 unknown).
	body    io.Reader
	bodyLen int64
	// guard: a stamped copy's conditions on the source it read (copyDoc).
	guard *copyGuard
}

// forward is one admitted request on its way to the store.
type forward = objectstore.Forward[state]

// Inspect names the object (or objects) the request writes and checks a
// session request's binding.
func (d dialect) Inspect(r *http.Request, token int64) (gateway.Inspection, *state, error) {
	t, ref := parseTarget(r)
	if ref != nil {
		return gateway.Inspection{}, nil, ref
	}
	if err := d.check(&t, token); err != nil {
		return gateway.Inspection{}, nil, err
	}
	if ref := checkBodyHeaders(r, &t); ref != nil {
		return gateway.Inspection{}, nil, ref
	}
	s := &state{target: t, bodyLen: -1}
	var insp gateway.Inspection
	w := t.writes()
	switch {
	case t.op == opRead:
		// Looked at on a route with fence_reads only, where a read is
		// authorized and fenced like a write of what it reads (parseRead).
		if t.unnamed != nil {
			insp.ReadsUnnamed = t.unnamed
			return insp, s, nil
		}
		insp.Vars, insp.Collection = vars(t.bucket, t.object), vars(t.bucket, "")
		return insp, s, nil
	case t.op == opBucket:
		// A write of the bucket, which may change every object in it: on
		// a hierarchical route whose upstream names collections it is
		// checked against the fences below the bucket; elsewhere a
		// "{bucket}/{object}" template has no key for it and refuses it.
		insp.WritesCollection = true
	case len(w) > 1:
		for _, o := range w {
			if o.Bucket != w[0].Bucket {
				// One collection per request: the gateway checks one
				// bucket's fence below the objects'.
				return gateway.Inspection{}, nil, fencegate.InvalidResource("the request writes objects in buckets %s and %s: the gateway fences writes of one bucket", w[0].Bucket, o.Bucket)
			}
			insp.Objects = append(insp.Objects, vars(o.Bucket, o.Name))
		}
	}
	// An object write is checked against its bucket's fence too: a
	// bucket write with a newer token refuses it.
	insp.Vars, insp.Collection = vars(w[0].Bucket, w[0].Name), vars(w[0].Bucket, "")
	switch t.op {
	case opCopy:
		// copyTo, rewriteTo read their source: a route with fence_reads
		// authorizes and fences it as a GET of it.
		insp.Reads = []map[string]string{vars(t.srcBucket, t.srcObject)}
	case opCompose:
		// Its sources, named in the body, read before the fence.
		var ref *fencegate.Error
		if insp.Reads, ref, insp.ReadsUnnamed = composeReads(r, &t); ref != nil {
			return gateway.Inspection{}, nil, ref
		}
	}
	return insp, s, nil
}

// check refuses what the gateway cannot forward safely (token: the
// request's, 0 if none).
func (u *Upstream) check(t *target, token int64) *fencegate.Error {
	switch t.op {
	case opUnsupported:
		return httprefusal.WithStatus(http.StatusNotImplemented, &fencegate.Error{Code: fencegate.CodeInvalidRequest, Message: t.why})
	case opChunk:
		if !u.verify(t.session, t.bucket) {
			return errUnknownSession()
		}
		if token != 0 && token != t.session.token {
			return &fencegate.Error{Code: fencegate.CodeInvalidToken,
				Message: fmt.Sprintf("this upload session was opened with token %d: each of its requests carries that token (a newer owner starts an upload of its own)", t.session.token),
				Token:   token}
		}
	case opUpload:
		if u.stampKey != "" && !t.multipart {
			return fencegate.InvalidRequest("uploadType=media carries no metadata for the gateway's stamp: use a multipart or resumable upload")
		}
	case opMove:
		if u.stampKey != "" {
			return errStampedMove()
		}
		if u.tracker != nil {
			return httprefusal.WithStatus(http.StatusNotImplemented, &fencegate.Error{Code: fencegate.CodeInvalidRequest,
				Message: "moveTo is not supported on a route with precondition: generation"})
		}
	}
	return nil
}

func vars(bucket, object string) map[string]string {
	return objectstore.Vars("bucket", bucket, "object", object)
}

// Prepare reads and checks a write's body that names objects, and stamps
// it (body).
func (d dialect) Prepare(f *forward) error {
	if f.State.op == opRead || f.State.op == opChunk {
		return nil
	}
	return d.body(f.In, f)
}

// rewrite prepares the outbound request: the endpoint's address, the
// worker's credentials and token removed (the transport adds the
// gateway's), the session binding dropped, the gateway's precondition set.
func (d dialect) Rewrite(pr *httputil.ProxyRequest, f *forward) {
	u := d.Upstream
	out := pr.Out
	out.URL.Scheme, out.URL.Host = u.endpoint.Scheme, u.endpoint.Host
	out.URL.RawPath = u.endpoint.Path + f.State.path
	out.URL.Path, _ = url.PathUnescape(out.URL.RawPath)
	out.URL.RawQuery = u.query(pr.In.URL.RawQuery, f)
	out.Host = ""
	if f.State.op == opChunk && out.Method == http.MethodPost {
		// A chunk, as the JSON API documents it (parseUpload).
		out.Method = http.MethodPut
	}
	out.Header.Del("Authorization")
	if f.State.body != nil {
		out.Body = io.NopCloser(f.State.body)
		out.ContentLength = f.State.bodyLen
		if f.State.bodyLen < 0 {
			out.Header.Del("Content-Length")
		} else {
			// Sent with its length, not in the worker's chunks.
			out.TransferEncoding = nil
		}
	}
	f.State.guard.rewrite(out)
}

// query is the forwarded query string: the worker's, without the session
// binding, with the gateway's ifGenerationMatch.
func (u *Upstream) query(raw string, f *forward) string {
	cond := f.Version != nil && f.Version.Conditional()
	if !cond && !strings.Contains(raw, sessionParam) && !strings.ContainsAny(raw, "%+") {
		return raw
	}
	kept := objectstore.KeepParams(raw, func(name string) bool {
		return name != sessionParam && !(cond && name == "ifGenerationMatch")
	})
	if cond {
		g := "0"
		if f.Version.IfMatch != "" {
			g = strings.Trim(f.Version.IfMatch, `"`)
		}
		kept = append(kept, "ifGenerationMatch="+g)
	}
	return strings.Join(kept, "&")
}

// do sends a request of the gateway's own to path on the store (with
// its query; body, if not nil, as text/plain), with its credentials.
func (u *Upstream) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.endpoint.Scheme+"://"+u.endpoint.Host+u.endpoint.Path+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "text/plain")
	}
	return u.send(req)
}

// send adds the gateway's credentials to a request and sends it.
func (u *Upstream) send(req *http.Request) (*http.Response, error) {
	if u.tokens != nil {
		tok, err := u.tokens.Token()
		if err != nil {
			return nil, fmt.Errorf("gcs: gateway credentials: %w", err)
		}
		tok.SetAuthHeader(req)
	}
	return u.transport.RoundTrip(req)
}

// RoundTrip sends a forward with the gateway's credentials and hands the
// worker a resumable session's URL on the gateway's address.
func (d dialect) RoundTrip(req *http.Request, f *forward) (*http.Response, error) {
	resp, err := d.send(req)
	if err != nil || f.State.op != opResumable {
		return resp, err
	}
	return d.sessionAnswer(f, resp)
}

// sessionAnswer hands the worker the session URL on the gateway's address.
// A session URL the gateway cannot rewrite is not handed out: its chunks
// would go around the fence.
func (u *Upstream) sessionAnswer(f *forward, resp *http.Response) (*http.Response, error) {
	for _, h := range []string{"Location", "X-Goog-Upload-Url"} {
		loc := resp.Header.Get(h)
		if loc == "" {
			continue
		}
		s, ok := u.sessionURL(f.In, f, loc)
		if !ok {
			resp.Body.Close()
			return nil, &fencegate.Error{Code: fencegate.CodeUpstreamUnavailable,
				Message: "the store answered a session URL the gateway cannot read; the upload was not opened through the gateway"}
		}
		resp.Header.Set(h, s)
	}
	return resp, nil
}

// maxObjectDoc bounds the answer the gateway reads to learn a write's
// generation (an object resource, or a rewrite's answer with one).
const maxObjectDoc = 1 << 20

// Answer reads the status and the generation of a write's answer (an
// object resource, or a rewrite's answer with one).
func (d dialect) Answer(f *forward, resp *http.Response) (int, string, error) {
	status := resp.StatusCode
	if o := resp.Header.Get("X-Http-Status-Code-Override"); o != "" {
		// A session's intermediate chunk, answered 200 to clients that
		// cannot take a 308: the object is not written yet.
		if n, err := strconv.Atoi(o); err == nil {
			status = n
		}
	}
	gen := ""
	if status >= 200 && status < 300 && resp.Body != nil {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxObjectDoc))
		resp.Body.Close()
		if err != nil {
			return 0, "", err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		gen = generationOf(b)
	}
	if gen != "" {
		gen = `"` + gen + `"`
	}
	return status, gen, nil
}

// generationOf reads the generation of the object an answer describes: an
// object resource, or a rewrite's {"done": true, "resource": {...}}.
func generationOf(b []byte) string {
	var doc struct {
		Generation json.Number `json:"generation"`
		Resource   *struct {
			Generation json.Number `json:"generation"`
		} `json:"resource"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return ""
	}
	g := doc.Generation
	if g == "" && doc.Resource != nil {
		g = doc.Resource.Generation
	}
	if n, err := strconv.ParseInt(string(g), 10, 64); err != nil || n <= 0 {
		return ""
	}
	return string(g)
}

// Tracks names the generation bookkeeping of a write (package
// precondition).
func (d dialect) Tracks(f *forward) (precondition.Kind, bool, bool) {
	kind, conditional := precondition.Replace, true
	t, r := f.State, f.In
	switch t.op {
	case opUpload, opCompose, opCopy:
	case opResumable:
		// The session carries the condition to the chunk that writes the
		// object; the object is unknown until that chunk's answer.
		kind = precondition.Opaque
	case opChunk:
		conditional = false
	case opObject:
		switch {
		case t.acl:
			// An ACL entry: the object's generation stays.
			kind, conditional = precondition.Opaque, false
		case r.Method == http.MethodDelete:
			kind = precondition.Delete
		}
	default:
		return 0, false, false
	}
	return kind, conditional, true
}

// Version asks the store for the generation of the write's object.
func (d dialect) Version(ctx context.Context, f *forward) (string, error) {
	return d.generation(ctx, f.State.bucket, f.State.object)
}

// generation asks the store for an object's generation, quoted as an
// entity-tag for package precondition ("" if the object does not exist).
func (u *Upstream) generation(ctx context.Context, bucket, object string) (string, error) {
	resp, err := u.do(ctx, http.MethodGet, "/storage/v1/b/"+url.PathEscape(bucket)+"/o/"+url.PathEscape(object)+"?fields=generation", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return "", nil
	case http.StatusOK:
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxObjectDoc))
		if err != nil {
			return "", err
		}
		if g := generationOf(b); g != "" {
			return `"` + g + `"`, nil
		}
		return "", fmt.Errorf("GET %s/%s: no generation in the answer", bucket, object)
	}
	return "", fmt.Errorf("GET %s/%s: %s", bucket, object, resp.Status)
}
