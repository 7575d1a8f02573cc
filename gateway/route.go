package gateway

import (
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// An Upstream forwards admitted requests to where a route points.
type Upstream interface {
	// Forward sends r upstream and streams the answer to w. req is the
	// gateway's view of r (its route, canonical path, fence keys, token,
	// the inspection's state), never nil; r's context is bounded by the
	// route's timeout. If Forward fails before anything was written to w
	// it returns the error, and the gateway answers it (a
	// *fencegate.Error as is; a deadline as 504; anything else as 502).
	Forward(w http.ResponseWriter, r *http.Request, req *Request) error
}

// Inspector is implemented by upstreams that authenticate requests or derive
// their own template variables (S3: bucket, key, the worker's access key).
type Inspector interface {
	// Inspect runs before the fence check. token is the request's fencing
	// token as the gateway parsed it from its token header; 0 if the
	// request carries none, or none valid (refused after the inspection
	// if the request is fenced). A *fencegate.Error refuses the request
	// with that status and code.
	Inspect(r *http.Request, token int64) (Inspection, error)
}

// Inspection is what an Inspector learnt about a request.
type Inspection struct {
	// Vars are template variables the upstream supplies (bucket, key).
	Vars map[string]string
	// Objects, if set, lists one Vars per object a multi-object request
	// writes (S3 DeleteObjects); every one is fenced.
	Objects []map[string]string
	// Reads, if set, lists one Vars per object the request reads besides
	// what it writes: a copy's source (S3 x-amz-copy-source, GCS
	// copyTo/rewriteTo/compose sources, an Azure copy source in the same
	// account). On a route with fence_reads, where a GET is authorized
	// and fenced like a write, each is authorized against the identity's
	// prefixes and admitted with the request's token, as a GET of it
	// would be: a copy is no way around either. Elsewhere reads pass
	// unfenced and Reads is not looked at.
	Reads []map[string]string
	// ReadsUnnamed, if set, refuses the request on a route with
	// fence_reads (elsewhere it is ignored): the request reads something
	// the upstream cannot name as one of the route's resources (an Azure
	// copy source in another account), whose authorization and fence
	// cannot be checked. A *fencegate.Error keeps its status and code.
	ReadsUnnamed error
	// Owner is the authenticated identity, for logs and fence bookkeeping.
	Owner string
	// Collection, if set, holds the variables of the collection the
	// request's objects belong to (S3: the bucket). Its key is the
	// template expanded up to the level of the variables it lacks
	// (resource.Template.ExpandPrefix): with "{bucket}/{key}", the
	// bucket's name; the objects' keys are below it. A write of objects is
	// then checked against the collection's fence too, and a write of the
	// collection (WritesCollection) against every object's below it.
	Collection map[string]string
	// WritesCollection: the request writes the collection itself, which
	// may change every object in it (S3: CreateBucket, DeleteBucket, a
	// bucket configuration write); it names no object, and is fenced on
	// the collection's key (on the one key of a template without member
	// variables, such as "{bucket}").
	WritesCollection bool
	// State, if set, is handed back to the upstream's Forward (in
	// Request.Inspected), so that what Inspect verified (S3: the worker's
	// signature, at one clock reading) is not verified again.
	State any
}

// ErrorWriter is implemented by upstreams whose clients expect refusals in
// another format than fencegate's JSON (S3 clients expect XML).
type ErrorWriter interface {
	WriteError(w http.ResponseWriter, r *http.Request, e *fencegate.Error)
}

// ObjectNamer is implemented by upstreams that name an object with one path
// segment in which "/" is sent as %2F (the GCS JSON API, Azure Blob Storage
// as their SDKs send it). Their routes accept encoded slashes, which the
// gateway otherwise refuses: such an upstream reads the segment as one
// name, and the resource key is derived from that name
// (resource.CleanObjectPath).
type ObjectNamer interface {
	EncodedSlashNames() bool
}

// Route is one compiled route of the configuration.
type Route struct {
	Name string

	host       string // lower case; "" matches any
	prefix     string
	methods    map[string]bool // nil matches any
	fenced     map[string]bool // nil: every method but GET, HEAD, OPTIONS, TRACE
	known      map[string]bool // registered and declared extension methods
	fenceReads bool
	fold       bool // case_insensitive: prefix and key compared in lower case
	tmpl       *resource.Template
	// decided are the request headers the gateway bases its decision on
	// (canonical form): the template's {header.X}; the token header and
	// credentials are added by the gateway.
	decided []string
	// pathHeaders: the template reads a header beside the path ("tenant:
	// {header.X-Tenant}/{path}"); a value that reads as a path of its own
	// is refused (pathLikeValue).
	pathHeaders bool

	maxBody      int64
	timeout      time.Duration
	drainTimeout time.Duration

	// hier: the route's keys form a hierarchy (Scope); dest: the methods
	// whose Destination header names a second key the request writes.
	hier bool
	// strict: every write of a key is a tree write of it, checked against
	// the collections' own keys (the rule before trees went by method),
	// kept where the route names COPY or MOVE or sets hierarchical: true,
	// so that the collection writes such a route recorded before go on
	// refusing older member writes.
	strict bool
	dest   map[string]bool
	// collections: the upstream names each request's collection
	// (RouteOptions.Collections).
	collections bool

	upstream     Upstream
	forwardToken bool // RouteOptions.ForwardToken
	inspector    Inspector
	errWriter    ErrorWriter
	// encodedSlash: the upstream is an ObjectNamer; %2F is accepted.
	encodedSlash bool
	writes       *writeLimit  // max_inflight_writes; nil: no cap
	inflight     atomic.Int64 // fenced writes being forwarded now

	// Auth, if set, authenticates every request and limits each identity
	// to its resource prefixes. Set it before the route serves.
	Auth Authenticator
	// Tokens, if set, verifies the route's new tokens with the lock service
	// that issued them (RouteVerify) instead of the fence's default
	// verifier. Set it before the route serves.
	Tokens TokenVerifier
}

// RouteOptions describe one route for NewRoute.
type RouteOptions struct {
	// Name names the route in logs, metrics and refusals.
	Name string
	// Host, if set, is the only Host the route serves (any spelling of
	// it); "" matches any host and forbids {host} in Resource.
	Host string
	// PathPrefix, if set, is the path prefix the route serves.
	PathPrefix string
	// Methods, if set, are the only methods the route serves.
	Methods []string
	// FencedMethods, if set, narrows the fenced methods to these (and to
	// methods the route does not know); nil fences every method but GET,
	// HEAD, OPTIONS and TRACE.
	FencedMethods []string
	// ExtensionMethods are method names outside the registry
	// (fencegate.KnownMethod) the route knows.
	ExtensionMethods []string
	// FenceReads fences every method, reads included.
	FenceReads bool
	// CaseInsensitive folds the prefix and resource keys to lower case.
	CaseInsensitive bool
	// Resource is the resource key template (package resource).
	Resource string
	// Vars reports whether the upstream supplies a template variable
	// (S3: bucket, key, key.N); nil: none.
	Vars func(name string) bool
	// MaxBodyBytes caps request bodies (413 beyond); 0: no limit.
	MaxBodyBytes int64
	// Timeout bounds one forwarded request; 0:
	// fencegate.DefaultUpstreamTimeout.
	Timeout time.Duration
	// DrainTimeout bounds the wait of a newer write for older ones in
	// flight.
	DrainTimeout time.Duration
	// MaxInflightWrites caps the fenced writes forwarded at once (503
	// too_many_writes beyond); 0: no cap.
	MaxInflightWrites int
	// DestinationMethods are the methods whose Destination header (RFC
	// 4918 §10.3) names a second resource the request writes: it is fenced
	// too, with the same token. Nil: COPY and MOVE, where the route fences
	// them and its keys come from the path; empty: none.
	DestinationMethods []string
	// Hierarchical makes the route's keys a hierarchy (Scope) separated by
	// '/': a write of a key is checked against the collections above it,
	// and a tree write (TreeMethod: a DELETE or MOVE of the key, the
	// Destination of a COPY or MOVE) against the keys below it too. Nil:
	// on where the template ends with {path} (or names it, and the route
	// names COPY or MOVE), or where the upstream names collections
	// (Collections). Set true, or on by naming COPY or MOVE in Methods or
	// FencedMethods: every write of a key is a tree write of it, checked
	// on the collections' own keys (Route.strict, the rule of before).
	Hierarchical *bool
	// Collections: the upstream names the collection of each request
	// (Inspection.Collection; S3: the bucket). On a hierarchical route an
	// object write is then admitted ScopeKey on its own key and
	// ScopeMember on its collection's, and a write of the collection
	// itself (Inspection.WritesCollection) ScopeTree on the collection's
	// key; the keys' other '/'-levels are not collections. Not
	// hierarchical, a collection write is refused unless the collection
	// and its objects share one key.
	Collections bool
	// ForwardToken sends the token header on to the upstream (a plain
	// HTTP route's forward_token); false, the default, has it removed from
	// the forward (Request.TokenHeader).
	ForwardToken bool
}

// NewRoute compiles a route around its upstream. Method names must be in
// their canonical (upper-case) spelling.
func NewRoute(c RouteOptions, up Upstream) (*Route, error) {
	vars := c.Vars
	if vars == nil {
		vars = func(string) bool { return false }
	}
	tmpl, err := resource.ParseTemplate(c.Resource, vars)
	if err != nil {
		return nil, err
	}
	if tmpl.Uses("host") && c.Host == "" {
		return nil, fmt.Errorf("route %s: {host} in the resource template needs match.host", c.Name)
	}
	rt := &Route{
		Name:         c.Name,
		host:         canonicalHost(c.Host),
		prefix:       c.PathPrefix,
		known:        make(map[string]bool),
		fenceReads:   c.FenceReads,
		fold:         c.CaseInsensitive,
		tmpl:         tmpl,
		maxBody:      c.MaxBodyBytes,
		timeout:      c.Timeout,
		drainTimeout: c.DrainTimeout,
		upstream:     up,
		forwardToken: c.ForwardToken,
		writes:       newWriteLimit(c.MaxInflightWrites),
	}
	if c.Host == "" {
		rt.host = ""
	}
	if rt.fold {
		rt.prefix = foldPath(rt.prefix)
	}
	for _, h := range tmpl.Headers() {
		rt.decided = append(rt.decided, textproto.CanonicalMIMEHeaderKey(h))
	}
	rt.pathHeaders = len(rt.decided) > 0 && (tmpl.Uses("path") || strings.Contains(tmpl.String(), "{path."))
	// Method names are compared exactly (RFC 9110 §9.1: case-sensitive);
	// config.Parse upper-cases the file's names, and the gateway
	// refuses requests with lower-case methods before any route matches.
	for _, m := range c.ExtensionMethods {
		rt.known[m] = true
	}
	if len(c.Methods) > 0 {
		rt.methods = make(map[string]bool)
		for _, m := range c.Methods {
			rt.methods[m] = true
		}
	}
	if len(c.FencedMethods) > 0 {
		rt.fenced = make(map[string]bool)
		for _, m := range c.FencedMethods {
			rt.fenced[m] = true
		}
	}
	if rt.timeout <= 0 {
		rt.timeout = fencegate.DefaultUpstreamTimeout
	}
	dav := tmpl.Uses("path") && (rt.fences("COPY") || rt.fences("MOVE"))
	switch {
	case c.DestinationMethods == nil && dav:
		c.DestinationMethods = []string{"COPY", "MOVE"}
	}
	for _, m := range c.DestinationMethods {
		if rt.fences(m) {
			if rt.dest == nil {
				rt.dest = make(map[string]bool)
			}
			rt.dest[m] = true
		}
	}
	// Hierarchical by default wherever the key is the path: whether a
	// request changes a collection's members is a property of its method
	// (TreeMethod), not of the route, so a REST collection written under
	// its own lease (POST /orders) does not refuse its members' older
	// leases, and a DELETE of it does (it removes them on every server).
	declared := slices.Contains(c.Methods, "COPY") || slices.Contains(c.Methods, "MOVE") ||
		slices.Contains(c.FencedMethods, "COPY") || slices.Contains(c.FencedMethods, "MOVE")
	rt.hier = (dav && declared) || strings.HasSuffix(tmpl.String(), "{path}") || c.Collections
	rt.strict = declared
	rt.collections = c.Collections
	if c.Hierarchical != nil {
		rt.hier = *c.Hierarchical
		rt.strict = *c.Hierarchical
	}
	rt.inspector, _ = up.(Inspector)
	rt.errWriter, _ = up.(ErrorWriter)
	if on, ok := up.(ObjectNamer); ok {
		rt.encodedSlash = on.EncodedSlashNames()
	}
	return rt, nil
}

// InFlight is the number of fenced writes this route is forwarding now
// (admitted or waiting in the fence), for the in-flight gauge and the
// console.
func (rt *Route) InFlight() int64 { return rt.inflight.Load() }

// matches reports whether the route serves the request. An empty method
// matches any (to pick the dialect of a refusal made before routing).
func (rt *Route) matches(host, path, method string) bool {
	if rt.host != "" && rt.host != host {
		return false
	}
	if rt.fold {
		// The upstream folds case, so /DOCS/x is the same object as
		// /docs/x: it must not fall through to a later route with another
		// key (and another fence).
		path = strings.ToLower(path)
	}
	if rt.prefix != "" && !strings.HasPrefix(path, rt.prefix) && path+"/" != rt.prefix {
		return false
	}
	return method == "" || rt.methods == nil || rt.methods[method]
}

// fences reports whether the route fences method. Without fenced_methods
// every method except GET, HEAD, OPTIONS and TRACE is fenced; with them,
// only the listed ones and any method the route does not know (an
// extension method is a write unless declared and left out).
func (rt *Route) fences(method string) bool {
	switch {
	case rt.fenceReads:
		return true
	case rt.fenced == nil:
		return !fencegate.ReadMethod(method)
	}
	return rt.fenced[method] || !(fencegate.KnownMethod(method) || rt.known[method])
}

// resources derives the fence keys of a request: one, or one per object of
// a multi-object request, sorted and without duplicates.
func (rt *Route) resources(host, path string, segs []string, h http.Header, insp Inspection) ([]string, *fencegate.Error) {
	rv := rt.requestVars(host, path, segs, h, insp)
	for _, name := range rt.decided {
		// A list-valued header sent twice or comma-joined has no one
		// value; upstreams disagree on which element they act on.
		vs := h.Values(name)
		if len(vs) > 1 || (len(vs) == 1 && strings.Contains(vs[0], ",")) {
			return nil, fencegate.InvalidResource("%s feeds the resource key and must be sent once, as a single value", name)
		}
		if rt.pathHeaders && len(vs) == 1 && pathLikeValue(vs[0]) {
			// Tenant "a/b" writing /x and tenant "a" writing /b/x are
			// two keys, and one file on an upstream that serves each
			// tenant from a directory named by the header; "a/b" would
			// also sit below tenant a's collections in the hierarchy.
			return nil, fencegate.InvalidResource("%s feeds the resource key beside the path and must not contain / or \\ nor be . or ..: "+
				"an upstream that joins it into a path would write another resource than the key names", name)
		}
	}
	if insp.WritesCollection {
		k, ferr := rt.collectionKey(rv, insp.Collection)
		if ferr != nil {
			return nil, ferr
		}
		return []string{k}, nil
	}
	objects := insp.Objects
	if objects == nil {
		var one [1]map[string]string // on the stack: objects stays here
		one[0] = insp.Vars
		objects = one[:]
	}
	keys := make([]string, 0, len(objects))
	for _, vars := range objects {
		rv.extra = vars
		k, err := rt.tmpl.Expand(rv.lookup)
		if err != nil {
			return nil, fencegate.InvalidResource("%s", err)
		}
		if len(k) > resource.MaxKeyLen {
			return nil, fencegate.InvalidResource("resource key is %d bytes; the limit is %d", len(k), resource.MaxKeyLen)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// readResources derives the fence keys of the objects a request reads
// (Inspection.Reads), sorted and without duplicates, for a route with
// fence_reads. A read object is named by the upstream's variables (and
// the route's host) alone: the request's path and headers name what it
// writes, not its source, so a template that needs them has no key for
// the source, and the request is refused (fail closed).
func (rt *Route) readResources(host string, insp Inspection) ([]string, *fencegate.Error) {
	if insp.ReadsUnnamed != nil {
		return nil, fencegate.AsError(insp.ReadsUnnamed)
	}
	if len(insp.Reads) == 0 {
		return nil, nil
	}
	rv := rt.requestVars(host, "", nil, http.Header(nil), insp)
	lookup := func(name string) (string, bool) {
		if name == "path" || strings.HasPrefix(name, "path.") || strings.HasPrefix(name, "header.") {
			return "", false
		}
		return rv.lookup(name)
	}
	keys := make([]string, 0, len(insp.Reads))
	for _, vars := range insp.Reads {
		rv.extra = vars
		k, err := rt.tmpl.Expand(lookup)
		if err != nil {
			return nil, fencegate.InvalidResource("the request reads an object (a copy's source) that resource template %q names no key for "+
				"with the object's own variables, so fence_reads cannot fence it: %s", rt.tmpl.String(), err)
		}
		if len(k) > resource.MaxKeyLen {
			return nil, fencegate.InvalidResource("the key of an object the request reads is %d bytes; the limit is %d", len(k), resource.MaxKeyLen)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// Hierarchical reports whether the route's keys form a hierarchy (Scope).
func (rt *Route) Hierarchical() bool { return rt.hier }

// Fences reports whether the route fences method (for `fencegate doctor`).
func (rt *Route) Fences(method string) bool { return rt.fences(method) }

// FencesDestination reports whether a request with method is fenced on the
// key its Destination header names too (RouteOptions.DestinationMethods).
func (rt *Route) FencesDestination(method string) bool { return rt.dest[method] }

// admission is one fence a request is admitted on.
type admission struct {
	key   string
	scope Scope
}

// TreeKey is the key that holds the tree level of the collection key on a
// hierarchical route without collections (RouteOptions.Collections): the
// highest token of the writes that changed key with everything below it
// (TreeMethod), which is what a write of a member is checked against. It
// is key+"/", the prefix of its members, which no request's key is (a
// path's trailing slash is not part of its key); for the root "/" it is
// "/" itself. A write of key that leaves its members alone (POST, PUT)
// raises key's own fence, not this one, so it never refuses a member's
// older lease.
func TreeKey(key string) string { return resource.MemberPrefix(key) }

// nonTree are the methods that change at most the resource they name
// (and, for COPY, not even that: its Destination), never the members of a
// collection at that path: a write of the collection's own content or
// properties, the creation of one, a lock. Every other method a route
// fences (DELETE, MOVE, BIND, UNBIND, REBIND, the versioning methods that
// can act on a whole tree, extension methods) is a tree write: fail
// closed.
var nonTree = map[string]bool{
	"POST": true, "PUT": true, "PATCH": true, "PROPPATCH": true, "COPY": true,
	"MKCOL": true, "MKCALENDAR": true, "MKWORKSPACE": true, "MKACTIVITY": true,
	"MKREDIRECTREF": true, "UPDATEREDIRECTREF": true, "LOCK": true, "UNLOCK": true,
	"ACL": true, "ORDERPATCH": true,
	// Reads, on a route with fence_reads.
	"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PROPFIND": true,
	"REPORT": true, "SEARCH": true,
}

// TreeMethod reports whether a request with method may change the
// members of the collection its path names (a WebDAV or REST DELETE of a
// collection, a MOVE of one): on a hierarchical route it is admitted as a
// tree write of its key. The Destination of a COPY or MOVE is always one.
func TreeMethod(method string) bool { return !nonTree[method] }

// admissions lists the fences a write of keys is admitted on, in key
// order. Keys are sorted and distinct; trees are those of keys the request
// may change with everything below them (TreeMethod, Destinations). On a
// route with collections: each key, and the collection's key (coll). On a
// hierarchical route: each key (ScopeKey), the tree key of each of trees
// (ScopeTree), and the tree key of every collection above each key that
// the route serves (ScopeMember), a tree write taking precedence.
func (rt *Route) admissions(host string, keys, trees []string, coll admission, buf []admission) []admission {
	if rt.collections {
		// The keys, and the collection's key (collectionAdmission).
		for _, k := range keys {
			if k != coll.key {
				buf = append(buf, admission{k, ScopeKey})
			}
		}
		if coll.key != "" {
			buf = append(buf, coll)
		}
		slices.SortFunc(buf, func(a, b admission) int { return strings.Compare(a.key, b.key) })
		return buf
	}
	if !rt.hier {
		for _, k := range keys {
			buf = append(buf, admission{k, ScopeKey})
		}
		return buf
	}
	if rt.strict {
		return rt.strictAdmissions(host, keys, trees, buf)
	}
	for _, k := range keys {
		switch {
		case strings.HasSuffix(k, "/"):
			// The root (or a key ending in '/'): its tree key is its own.
			buf = append(buf, admission{k, ScopeTree})
		case slices.Contains(trees, k):
			// TreeKey only here: k+"/" is an allocation per write.
			buf = append(buf, admission{k, ScopeKey}, admission{TreeKey(k), ScopeTree})
		default:
			buf = append(buf, admission{k, ScopeKey})
		}
		for _, p := range rt.parents(host, k) {
			// TreeKey(p), cut from k: no allocation per level.
			tk := "/"
			if p != "/" {
				tk = k[:len(p)+1]
			}
			buf = append(buf, admission{tk, ScopeMember})
		}
	}
	// A tree write of a key takes precedence over a member's admission on
	// it (it checks and waits for more); a ScopeKey admission never shares
	// a key with either (only the root's tree key is a request's key).
	slices.SortFunc(buf, func(a, b admission) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return scopeRank(a.scope) - scopeRank(b.scope)
	})
	return slices.CompactFunc(buf, func(a, b admission) bool { return a.key == b.key })
}

// strictAdmissions are the admissions of a strict route (Route.strict):
// ScopeTree on each key, and on the tree key of each of trees; ScopeMember
// on every key above each one that the route serves, a key of the request
// itself taking precedence.
func (rt *Route) strictAdmissions(host string, keys, trees []string, buf []admission) []admission {
	for _, k := range keys {
		buf = append(buf, admission{k, ScopeTree})
		if tk := TreeKey(k); tk != k && slices.Contains(trees, k) {
			// A tree write is recorded on the tree key too, where a
			// route with the default rule looks for it: the route may be
			// switched to it (COPY and MOVE left out of fenced_methods,
			// hierarchical unset), and its member writes older than
			// this one must go on being refused.
			buf = append(buf, admission{tk, ScopeTree})
		}
		for _, p := range rt.parents(host, k) {
			if _, found := slices.BinarySearch(keys, p); !found {
				buf = append(buf, admission{p, ScopeMember})
			}
		}
	}
	slices.SortFunc(buf, func(a, b admission) int { return strings.Compare(a.key, b.key) })
	return slices.CompactFunc(buf, func(a, b admission) bool { return a.key == b.key })
}

// parents are the keys above k (resource.Parents) that the route serves:
// on a {path} route, those below its prefix; the others are another
// route's keys.
func (rt *Route) parents(host, k string) []string {
	ps := resource.Parents(k)
	if rt.tmpl.String() != "{path}" {
		return ps
	}
	return slices.DeleteFunc(ps, func(p string) bool { return !rt.matches(host, p, "") })
}

// scopeRank orders admissions of one key: the one kept first.
func scopeRank(s Scope) int {
	switch s {
	case ScopeTree:
		return 0
	case ScopeKey:
		return 1
	}
	return 2
}

// requestVars are the template variables of a request.
func (rt *Route) requestVars(host, path string, segs []string, h http.Header, insp Inspection) requestVars {
	if rt.host != "" {
		// The matched, configured host: every spelling of it is one fence.
		host = rt.host
	}
	rv := requestVars{
		segs: segs, path: strings.TrimSuffix(path, "/"), host: host,
		header: h.Values, extra: insp.Vars, fold: rt.fold,
	}
	if rv.path == "" {
		rv.path = "/"
	}
	return rv
}

// ResourceOf derives the fence key of one object an upstream names by its
// variables alone (S3: bucket, key, key.N), as a request writing it would:
// `fencegate fence rebuild` maps scanned objects to fences with it. A
// template naming request parts (path, host, headers) has no key here.
func (rt *Route) ResourceOf(vars map[string]string) (string, error) {
	return rt.tmpl.Expand(func(name string) (string, bool) {
		v, ok := vars[name]
		if ok && rt.fold {
			v = strings.ToLower(v)
		}
		return v, ok
	})
}

// pathLikeValue reports whether a header value reads as a path, or a step
// of one, to an upstream that joins it into a file path: it holds a '/' or
// a backslash, or is "." or "..".
func pathLikeValue(v string) bool {
	return strings.ContainsAny(v, `/\`) || v == "." || v == ".."
}
