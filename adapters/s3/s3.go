// Package s3 is fencegate's S3 upstream adapter: object-level fencing in
// front of S3 or an S3-compatible store.
//
// Workers keep their own S3 SDK, point it at the gateway and sign with keys
// of their own (the route's clients). The gateway verifies their SigV4
// signature, fences the object ({bucket}/{key}) and re-signs the request
// with the gateway's credentials, which workers never hold: there is no
// write path around the fence. With `precondition: etag` the gateway also
// makes every PutObject and CompleteMultipartUpload conditional on the ETag
// it last wrote (If-Match, or If-None-Match: * for an object it never
// wrote), so even a request already handed to S3 cannot overwrite a newer
// version.
package s3

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

// Upstream forwards S3 requests. It implements gateway.Upstream,
// gateway.Inspector and gateway.ErrorWriter.
type Upstream struct {
	*objectstore.Core[state]
	endpoint     *url.URL
	region       string
	creds        aws.CredentialsProvider
	signer       upstreamSigner
	clients      map[string]string // access key id -> secret
	keys         keyCache          // signing keys of verified worker requests
	vhostSuffix  string
	keyPrefixes  []int // N of every {key.N} in the resource template
	precondEtag  bool
	conds        atomic.Pointer[Conditions] // nil: unmeasured
	stamp        bool                       // s3.stamp: forwards carry the token in stampHeader
	stampHeader  string                     // the metadata header carrying the token
	bucketConfig bool                       // bucket configuration writes are fenced, not refused
	foldSlash    bool                       // "K/" and "K" share one fence (s3.fold_trailing_slash)
	transport    http.RoundTripper
	now          func() time.Time
	// MaxChunkBytes bounds one chunk of a signed aws-chunked body, which
	// the gateway holds in memory to re-sign it. Default 8 MiB.
	maxChunk int
	// sign signs a forwarded request (signer.sign; aws-sdk-go-v2's signer
	// in a -tags sdksigner build or BenchmarkSignerEndToEnd, to compare).
	sign func(req *http.Request, creds aws.Credentials, payload string, now time.Time)
}

// Options configure New.
type Options struct {
	// Spec: the Endpoint is required; every {key.N} of the Resource is a
	// key prefix the upstream supplies; Precondition compares ETags and
	// needs {bucket} and {key}; StampKey is a metadata header
	// (x-amz-meta-NAME; empty: DefaultStampHeader). The Transport
	// defaults to objectstore.NewTransport(nil).
	objectstore.Spec
	// Region is the region the gateway signs for. Empty: us-east-1.
	Region string
	// AccessKeyID and SecretAccessKey are the gateway's own credentials;
	// both empty: the AWS default chain (environment, shared config,
	// instance role).
	AccessKeyID     string
	SecretAccessKey string
	// Clients are the worker keys whose SigV4 signatures the gateway
	// verifies (at least one; never the gateway's own key).
	Clients []Client
	// VirtualHostSuffix enables virtual-hosted requests: the bucket is the
	// host label before this suffix. Empty: path-style only.
	VirtualHostSuffix string
	// FenceBucketConfig admits bucket configuration writes (a PUT,
	// DELETE or POST on a bucket with a subresource) fenced on the
	// bucket's key; false refuses them (403 AccessDenied): they can
	// change or expose every object of the bucket.
	FenceBucketConfig bool
	// FoldTrailingSlash fences the key "K/" as "K", for a store that reads
	// both as one object (VersityGW's posix backend does for tags,
	// retention and legal hold). False: the two are distinct objects, and
	// a settings write (tagging, ACL, retention, legal hold, restore) is
	// fenced on both spellings, since such a store changes the other one.
	FoldTrailingSlash bool
}

// Client is a worker key the gateway verifies SigV4 signatures with.
type Client struct {
	AccessKeyID     string
	SecretAccessKey string
}

var keyPrefixVar = regexp.MustCompile(`\{key\.(\d+)\}`)

// New returns the upstream of an S3 route. Without static credentials the
// gateway's own come from the AWS default chain (environment, shared
// config, instance role).
func New(ctx context.Context, opts Options) (*Upstream, error) {
	c := &opts
	ep, err := objectstore.ParseEndpoint("s3.endpoint", c.Endpoint, false)
	if err != nil {
		return nil, err
	}
	u := &Upstream{
		endpoint: ep, region: c.Region,
		clients:      make(map[string]string),
		vhostSuffix:  strings.ToLower(strings.Trim(c.VirtualHostSuffix, ".")),
		precondEtag:  c.Precondition,
		bucketConfig: c.FenceBucketConfig,
		foldSlash:    c.FoldTrailingSlash,
		transport:    opts.Transport,
		now:          c.Clock(),
		maxChunk:     8 << 20,
	}
	u.region = cmp.Or(u.region, "us-east-1")
	u.signer.region = u.region
	u.sign = u.signer.sign
	if sdkSigned {
		u.sign = sdkSign(u.region)
	}
	if u.transport == nil {
		u.transport = objectstore.NewTransport(nil)
	}
	if len(c.Clients) == 0 {
		return nil, errors.New("s3.clients: at least one worker key is required (workers never use the gateway's credentials)")
	}
	for i, cl := range c.Clients {
		if cl.AccessKeyID == "" || cl.SecretAccessKey == "" {
			return nil, fmt.Errorf("s3.clients[%d]: access_key_id and secret_access_key are required", i)
		}
		if cl.AccessKeyID == c.AccessKeyID {
			return nil, fmt.Errorf("s3.clients[%d]: a worker must not sign with the gateway's own access key", i)
		}
		u.clients[cl.AccessKeyID] = cl.SecretAccessKey
	}
	switch {
	case c.AccessKeyID != "" || c.SecretAccessKey != "":
		if c.AccessKeyID == "" || c.SecretAccessKey == "" {
			return nil, errors.New("s3: set both access_key_id and secret_access_key, or neither (AWS default chain)")
		}
		u.creds = credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, "")
	default:
		cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(u.region))
		if err != nil {
			return nil, fmt.Errorf("s3: load AWS default credentials: %w", err)
		}
		u.creds = cfg.Credentials
	}
	for _, m := range keyPrefixVar.FindAllStringSubmatch(c.Resource, -1) {
		n, _ := strconv.Atoi(m[1])
		u.keyPrefixes = append(u.keyPrefixes, n)
	}
	// The header is resolved with stamping off too: `fence rebuild` scans
	// the stamps a route wrote while it was on.
	u.stamp, u.stampHeader = c.Stamp, strings.ToLower(c.StampKey)
	if u.stampHeader == "" {
		u.stampHeader = DefaultStampHeader
	}
	if c.Stamp && (!strings.HasPrefix(u.stampHeader, "x-amz-meta-") || len(u.stampHeader) == len("x-amz-meta-")) {
		return nil, fmt.Errorf("s3.stamp_header must be an object metadata header (x-amz-meta-NAME), got %q", c.StampKey)
	}
	tracker, err := c.Tracker("etag", "S3", "bucket", "key")
	if err != nil {
		return nil, err
	}
	u.Core = objectstore.New[state](dialect{u}, objectstore.Options{Tracker: tracker})
	return u, nil
}

// dialect is the S3 API behind the object-store core.
type dialect struct{ *Upstream }

// Inspect authenticates the worker and names the object (or, for
// DeleteObjects, every object) the request writes. The signature is
// verified once per request, at one reading of the clock; Forward gets
// what Inspect verified.
func (d dialect) Inspect(r *http.Request, token int64) (gateway.Inspection, *state, error) {
	insp, s, err := d.inspect(r)
	if err != nil {
		return gateway.Inspection{}, nil, err.refusal()
	}
	return insp, s, nil
}

func (u *Upstream) inspect(r *http.Request) (gateway.Inspection, *state, *s3Error) {
	a, key, err := u.authenticate(r)
	if err != nil {
		return gateway.Inspection{}, nil, err
	}
	t, err := u.parseTarget(r)
	if err != nil {
		return gateway.Inspection{}, nil, err
	}
	if _, ok := r.Header["X-Amz-Rename-Source"]; ok || queryHas(r.URL.RawQuery, "renameObject") {
		// RenameObject (S3 Express) removes the object its header names:
		// a write to a second object, which the fence key of the path
		// does not cover.
		return gateway.Inspection{}, nil, errNotImplemented("RenameObject is not supported by the gateway: it would write an object the gateway does not fence")
	}
	switch t.op {
	case opPostObject:
		return gateway.Inspection{}, nil, errNotImplemented("POST (browser form) uploads are not supported by the gateway: the object they write is named in the form, which the gateway does not read")
	case opBucketConfig:
		if !u.bucketConfig {
			return gateway.Inspection{}, nil, errAccessDenied("bucket configuration writes are refused on this route: they can change or expose every object of the bucket (s3.bucket_config: fence admits them, fenced on the bucket's key)")
		}
	}
	if err := checkWrite(r, t); err != nil {
		return gateway.Inspection{}, nil, err
	}
	s := &state{auth: a, key: key, target: t}
	insp := gateway.Inspection{Owner: a.accessKey}
	if t.bucket != "" {
		insp.Vars = u.vars(t.bucket, t.key)
		if !u.foldSlash && settingsWrite(r, t) {
			// The store may resolve the key as a path (VersityGW posix:
			// "K/" and "K" are one file for tags, retention and legal
			// hold): fenced on both spellings. With s3.fold_trailing_slash
			// both share one fence (vars) and this is one key.
			insp.Objects = []map[string]string{insp.Vars, u.vars(t.bucket, slashTwin(t.key))}
		}
		// The bucket is the collection of its objects: a write of the
		// bucket itself is fenced on the bucket's key, hierarchically
		// with its objects' keys.
		insp.Collection = map[string]string{"bucket": t.bucket}
		insp.WritesCollection = t.op == opBucket || t.op == opBucketConfig
	}
	u.copySourceReads(r.Header, &insp)
	if t.op == opDeleteObjects {
		d, err := readDeleteObjects(r)
		if err != nil {
			return gateway.Inspection{}, nil, err
		}
		s.del = d
		for _, k := range d.keys {
			insp.Objects = append(insp.Objects, u.vars(t.bucket, k))
		}
	}
	return insp, s, nil
}

// ObjectVars are the template variables of one object (bucket, key, key.N),
// as Inspect derives them for a request writing it.
func (u *Upstream) ObjectVars(bucket, key string) map[string]string { return u.vars(bucket, key) }

func (u *Upstream) vars(bucket, key string) map[string]string {
	if u.foldSlash {
		// "K/" is "K" on this route's store (s3.fold_trailing_slash).
		key = strings.TrimSuffix(key, "/")
	}
	v := objectstore.Vars("bucket", bucket, "key", key)
	if len(u.keyPrefixes) > 0 {
		segs := strings.Split(strings.TrimSuffix(key, "/"), "/")
		for _, n := range u.keyPrefixes {
			if key != "" && n <= len(segs) {
				v["key."+strconv.Itoa(n)] = strings.Join(segs[:n], "/")
			}
		}
	}
	return v
}

// authenticate verifies the worker's signature and returns it with the
// worker's signing key.
func (u *Upstream) authenticate(r *http.Request) (*authRequest, []byte, *s3Error) {
	a, err := parseAuth(r, u.now())
	if err != nil {
		return nil, nil, err
	}
	secret, ok := u.clients[a.accessKey]
	if !ok {
		return nil, nil, errInvalidAccessKey()
	}
	key, ok := a.verify(r, secret, &u.keys)
	if !ok {
		return nil, nil, errSignatureMismatch()
	}
	if strings.HasPrefix(a.payloadHash, "STREAMING-") {
		switch a.payloadHash {
		case streamingSigned, streamingSignedTrailer, streamingUnsigned:
		default:
			return nil, nil, errNotImplemented("payload signing " + a.payloadHash + " is not supported by the gateway")
		}
	} else if a.payloadHash != unsignedPayload && (len(a.payloadHash) != 64 || !isHex(a.payloadHash)) {
		return nil, nil, errInvalidArgument("x-amz-content-sha256 must be a hex SHA-256, UNSIGNED-PAYLOAD or a STREAMING- form")
	}
	return a, key, nil
}

// state is what Inspect verified of a request and what its forward needs
// besides: the signature is verified once per request, at one reading of
// the clock.
type state struct {
	auth   *authRequest
	key    []byte
	target target
	del    *deleteRequest // DeleteObjects: the body Inspect read

	payloadHash string
	chunks      *chunkSigner // signed aws-chunked bodies, re-signed per chunk
	// deletes is the bookkeeping of each object of a DeleteObjects.
	deletes []deleteWrite
	// bodyHeaders are set on the outbound request: the integrity headers
	// of a DeleteObjects body the gateway wrote anew (Forward.Body).
	bodyHeaders map[string]string
	rebodied    bool
	// copySrc: a stamped CopyObject with the COPY directive, sent as
	// REPLACE with the source's metadata (copystamp.go).
	copySrc *objectstore.CopySource
}

// forward is one admitted request on its way to the store. Its Body is
// the whole request body when it is in memory (the gateway read a small
// body before the fence, or a DeleteObjects body was written anew); nil
// if it streams.
type forward = objectstore.Forward[state]

// Prepare readies the forward: the payload hash the gateway signs, the
// chunk signer of a signed aws-chunked body, and a DeleteObjects' per-
// object preconditions (its body written anew with them).
func (d dialect) Prepare(f *forward) error {
	u, s, r := d.Upstream, f.State, f.In
	a := s.auth
	s.payloadHash = a.payloadHash
	if a.presigned && a.payloadHash == unsignedPayload {
		s.payloadHash = unsignedPayload
	}
	if a.payloadHash == streamingSigned || a.payloadHash == streamingSignedTrailer {
		s.chunks = newChunkSigner(r.Body, a, s.key, a.payloadHash == streamingSignedTrailer, u.maxChunk)
	}
	if u.stamp && f.Token > 0 && s.target.op == opCopyObject {
		replace, serr := copyDirective(r.Header)
		if serr != nil {
			return serr.refusal()
		}
		if !replace {
			c, err := u.readCopySource(r.Context(), r.Header)
			if err != nil {
				return err
			}
			s.copySrc = c
		}
	}
	if !u.precondEtag || f.Token <= 0 || s.target.op != opDeleteObjects || s.del == nil || f.Route == nil {
		return nil
	}
	rt := f.Route
	body, err := u.addDeleteObjectsPreconditions(r, f, s.del, func(bucket, key string) (string, error) {
		return rt.ResourceOf(u.vars(bucket, key))
	})
	if err != nil || body == nil {
		return err
	}
	set, payload, ok, serr := rebody(r.Header, s.payloadHash, s.del.body, body)
	switch {
	case serr != nil:
		for _, d := range s.deletes {
			d.w.Answered(r.Context(), serr.Status, "")
		}
		return serr.refusal()
	case ok:
		// The gateway has the whole body (Inspect read it); reading it
		// marks it sent for the gateway's drain logic, which then waits
		// for the answer instead of aborting.
		io.Copy(io.Discard, r.Body)
		s.bodyHeaders, s.payloadHash, s.rebodied = set, payload, true
		f.Body = body
	default:
		// An integrity header the gateway cannot compute: the body goes
		// as sent, its objects unconditioned.
		for _, d := range s.deletes {
			d.w.IfMatch = ""
		}
	}
	return nil
}

// Finish answers a forward's failure: a chunk the gateway could not
// re-sign is the worker's error; a DeleteObjects that may or may not have
// reached S3 leaves its objects unknown.
func (d dialect) Finish(f *forward, err error) error {
	s := f.State
	if err != nil && s.chunks != nil && s.chunks.err != nil {
		return s.chunks.err.refusal()
	}
	var ref *fencegate.Error
	if err != nil && !errors.As(err, &ref) {
		for _, d := range s.deletes {
			d.w.Failed(f.In.Context())
		}
	}
	return err
}

// rewrite prepares the outbound request: path-style URL on the endpoint,
// the worker's authentication removed (the transport signs anew).
func (d dialect) Rewrite(pr *httputil.ProxyRequest, f *forward) {
	u, s := d.Upstream, f.State
	out := pr.Out
	out.URL.Scheme = u.endpoint.Scheme
	out.URL.Host = u.endpoint.Host
	out.URL.Path, out.URL.RawPath = upstreamPath(u.endpoint.Path, s.target)
	out.URL.RawQuery = upstreamQuery(pr.In.URL.RawQuery)
	out.Host = ""
	h := out.Header
	for _, k := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
		h.Del(k)
	}
	h.Set("X-Amz-Content-Sha256", s.payloadHash)
	if f.Version != nil {
		combineConditions(pr.In.Header, f.Version).apply(h)
	}
	for k, v := range s.bodyHeaders {
		h.Set(k, v)
	}
	if s.rebodied {
		out.ContentLength = int64(len(f.Body))
	}
	switch {
	case s.chunks != nil:
		out.Body = s.chunks
	case f.Body != nil && int64(len(f.Body)) == out.ContentLength:
		// A body whole in memory goes as a reader net/http knows to be
		// one (a bytes.Reader): it then writes head and body in one write
		// (one TCP segment for a small PutObject) instead of flushing the
		// head first, as it must for ReverseProxy's wrapper of the body,
		// which could block. The bytes are those the worker sent (or the
		// DeleteObjects body written anew), as gateway.Request.Body says.
		out.Body = io.NopCloser(bytes.NewReader(f.Body))
	}
	if s.copySrc != nil {
		// The source's metadata, on the source's version; the stamp and
		// the REPLACE directive are set below.
		copySourceConditions.SendSource(h, s.copySrc, "X-Amz-Meta-", contentHeaders)
	}
	if u.stamp && f.Token > 0 && (s.copySrc != nil || stamps(pr.In, s.target.op)) {
		// Set, not added: a worker's own copy would forge the stamp
		// `fence rebuild` trusts. The header is signed with the rest of the
		// request by the signing transport.
		h.Set(u.stampHeader, strconv.FormatInt(f.Token, 10))
		if s.target.op == opCopyObject {
			// One spelling for the store, whatever the worker's case.
			h.Set("X-Amz-Metadata-Directive", "REPLACE")
		}
	}
}

// DefaultStampHeader is the object metadata header of `stamp: true`.
const DefaultStampHeader = "x-amz-meta-fencing-token"

// stamps reports whether a write of op takes the metadata the request
// carries: PutObject, CreateMultipartUpload (whose metadata the completed
// object gets; UploadPartCopy copies no metadata) and CopyObject with the
// REPLACE directive. A CopyObject with the default COPY directive would
// get the source's metadata, stamp included: it is sent as REPLACE
// (copySource).
func stamps(r *http.Request, o op) bool {
	switch o {
	case opPutObject:
		return true
	case opCopyObject:
		replace, err := copyDirective(r.Header)
		return replace && err == nil
	case opOther:
		return r.Method == http.MethodPost && queryHas(r.URL.RawQuery, "uploads")
	}
	return false
}

// upstreamQuery drops presigned-URL authentication parameters.
func upstreamQuery(raw string) string {
	if !strings.Contains(raw, "X-Amz-") && !strings.ContainsAny(raw, "%+") {
		return raw
	}
	// The name checkWriteQuery and the store read ("X-Amz-%53ignature").
	return strings.Join(objectstore.KeepParams(raw, func(name string) bool { return !slices.Contains(presignParams, name) }), "&")
}

// send signs req with the gateway's credentials just before it is sent,
// when its headers are final, and sends it; chunks, if set, re-signs a
// signed aws-chunked body from the request's seed signature.
func (u *Upstream) send(req *http.Request, payload string, chunks *chunkSigner) (*http.Response, error) {
	creds, err := u.creds.Retrieve(req.Context())
	if err != nil {
		return nil, fmt.Errorf("s3: gateway credentials: %w", err)
	}
	now := u.now().UTC()
	u.sign(req, creds, payload, now)
	if chunks != nil {
		seed := req.Header.Get("Authorization")
		i := strings.LastIndex(seed, "Signature=")
		if i < 0 {
			return nil, errors.New("s3: signed request has no signature")
		}
		date := now.Format("20060102")
		chunks.setOutput(u.signer.signingKey(creds.SecretAccessKey, date),
			now.Format(amzDateFormat), date+"/"+u.region+"/s3/aws4_request", seed[i+len("Signature="):])
	}
	return u.transport.RoundTrip(req)
}

// RoundTrip signs and sends a forward and does the bookkeeping of a
// DeleteObjects' answer.
func (d dialect) RoundTrip(req *http.Request, f *forward) (*http.Response, error) {
	s := f.State
	resp, err := d.send(req, s.payloadHash, s.chunks)
	if err == nil && s.deletes != nil {
		s.deletesAnswered(req.Context(), resp)
	}
	return resp, err
}

// Answer reads the status and the ETag of a write's answer. A 412 that a
// condition of the worker's own caused (the gateway's held) is recorded
// here and passed on (status 0).
func (d dialect) Answer(f *forward, resp *http.Response) (int, string, error) {
	// A copy's conditions on its source (the worker's, or the gateway's
	// on the version it read) may fail too.
	ambiguous := combineConditions(f.In.Header, f.Version).ambiguous || f.State.copySrc != nil ||
		f.State.target.op == opCopyObject && hasAny(f.In.Header, copySourceConditions.Names())
	if resp.StatusCode == http.StatusPreconditionFailed && f.Version.Conditional() &&
		preconditionFailed(f.In.Context(), f.Version, ambiguous,
			func(ctx context.Context) (string, error) { return d.headETag(ctx, f.State.target) }) {
		return 0, "", nil
	}
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}

// Tracks names the ETag bookkeeping of a write (package precondition).
// A worker's own condition that does not pin a version (If-Match: *,
// If-None-Match on an ETag, a size or a time) is satisfied by a newer
// owner's version too: it is combined with the gateway's
// (combineConditions).
func (d dialect) Tracks(f *forward) (precondition.Kind, bool, bool) {
	var kind precondition.Kind
	conditional := true
	switch f.State.target.op {
	case opPutObject:
		kind = precondition.Replace
	case opDeleteObject:
		// If-Match where the store honours it (ProbeConditions); the
		// delete is tracked either way.
		kind, conditional = precondition.Delete, d.Conditions().Delete.Honoured
	case opDeleteVersion:
		// The object may stay or change version: re-learnt by the next
		// write. Not conditional: the gateway's ETag is the current
		// version's, not the one deleted.
		kind, conditional = precondition.Opaque, false
	case opCompleteMultipart:
		kind = precondition.Opaque
	case opCopyObject:
		// S3-compatible stores differ on destination preconditions
		// (ProbeConditions); the copy is fenced and its ETag re-learnt
		// either way.
		kind, conditional = precondition.Opaque, d.Conditions().CopyDest.Honoured
	default:
		return 0, false, false
	}
	return kind, conditional, true
}

// Version asks S3 for the ETag of the write's object.
func (d dialect) Version(ctx context.Context, f *forward) (string, error) {
	return d.headETag(ctx, f.State.target)
}

// headETag asks the upstream for an object's ETag header ("" if it does
// not exist).
func (u *Upstream) headETag(ctx context.Context, t target) (string, error) {
	resp, err := u.head(ctx, t, "", nil)
	if err != nil {
		return "", err
	}
	return objectstore.HeadVersion(resp, t.bucket+"/"+t.key, "ETag")
}

// head sends a HEAD of t (with query and the headers h) signed with the
// gateway's credentials; the answer's body is closed.
func (u *Upstream) head(ctx context.Context, t target, query string, h http.Header) (*http.Response, error) {
	p, rp := upstreamPath(u.endpoint.Path, t)
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u.endpoint.Scheme+"://"+u.endpoint.Host+rp, nil)
	if err != nil {
		return nil, err
	}
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = p, rp, query
	maps.Copy(req.Header, h)
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	resp, err := u.send(req, emptySHA256, nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// hasAny reports whether h has any of names.
func hasAny(h http.Header, names []string) bool {
	for _, n := range names {
		if _, ok := h[n]; ok {
			return true
		}
	}
	return false
}
