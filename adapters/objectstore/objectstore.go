// Package objectstore is the core of fencegate's object-store upstreams:
// what S3, GCS and Azure Blob Storage routes share, written once. A store
// is a Dialect (its protocol: how a request names the objects it writes,
// how the gateway signs a forward, how the store tells a version, how it
// formats an error); Core implements the gateway's interfaces over it
// (gateway.Upstream, gateway.Inspector, gateway.ErrorWriter,
// gateway.ObjectNamer) with one Forward flow:
//
//  1. Inspect: the dialect authenticates the worker and classifies the
//     request; what it learnt (its state) goes back to the gateway in the
//     Inspection, and comes back to Forward in its gateway.Request
//     argument, never through a context value and never inspected twice.
//  2. Prepare: the dialect readies the forward (reads a body that names
//     objects, stamps it).
//  3. The precondition bookkeeping (package precondition): the write is
//     made conditional on the version the gateway last wrote, when the
//     route asks for it and the dialect tracks the operation.
//  4. The forward, through relay.Send, with the dialect's rewrite and
//     transport given the forward's state as an argument; the answer's
//     version is recorded; a failure the store may have seen marks the
//     version unknown.
//
// Refusals are written by one function (Core.WriteError): status and the
// headers every refusal carries, the body in the dialect's format.
package objectstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/precondition"
)

// Dialect is one object store's protocol. S is the dialect's state of
// one request: what Inspect learnt, then what the forward of it needs.
type Dialect[S any] interface {
	// Inspect authenticates the worker and classifies r: the objects it
	// writes (the Inspection's Vars, Objects, Collection) and the
	// dialect's state of it. token is r's fencing token as the gateway
	// parsed it (gateway.Inspector). A *fencegate.Error refuses r.
	Inspect(r *http.Request, token int64) (gateway.Inspection, *S, error)
	// Prepare readies the forward of an admitted request before its
	// precondition (a body that names objects read and checked, a stamp
	// set). An error refuses the request; nothing was sent.
	Prepare(f *Forward[S]) error
	// Tracks names the precondition bookkeeping of a fenced write: its
	// kind and whether the gateway makes it conditional; ok false leaves
	// the write untracked. A condition of the worker's own that pins a
	// version (Options.PinsVersion) is the core's to keep.
	Tracks(f *Forward[S]) (kind precondition.Kind, conditional, ok bool)
	// Version asks the store for the current version of the tracked
	// object of f, quoted as an entity-tag ("" if it does not exist).
	Version(ctx context.Context, f *Forward[S]) (string, error)
	// Rewrite prepares the outbound request (address, the worker's
	// credentials and the token header removed, the gateway's
	// precondition and stamp set).
	Rewrite(pr *httputil.ProxyRequest, f *Forward[S])
	// RoundTrip signs req with the gateway's credentials, sends it and
	// does the dialect's own reading of the answer (a session URL, a
	// lease); the version bookkeeping is the core's (Answer).
	RoundTrip(req *http.Request, f *Forward[S]) (*http.Response, error)
	// Answer reads the status and the version (an entity-tag, "" if the
	// answer names none) of a tracked write's answer. It may replace
	// resp.Body with what it read; an error fails the forward. Status 0:
	// the dialect recorded the outcome itself (S3: a 412 that a
	// condition of the worker's own caused), and the answer passes.
	Answer(f *Forward[S], resp *http.Response) (status int, version string, err error)
	// RefusalBody is a refusal's body in the store's error format; it sets
	// the Content-Type and the dialect's own headers on h.
	RefusalBody(h http.Header, e *fencegate.Error) []byte
}

// Guard is implemented by dialects that act on the store after the
// precondition and before the forward (Azure's lease guard). An error
// refuses the request, its version marked unknown.
type Guard[S any] interface {
	Guard(f *Forward[S]) error
}

// Finisher is implemented by dialects with bookkeeping of their own to
// finish when a forward failed (S3: a chunk it could not re-sign, the
// objects of a DeleteObjects). It returns the error to answer.
type Finisher[S any] interface {
	Finish(f *Forward[S], err error) error
}

// Forward is one admitted request on its way to the store.
type Forward[S any] struct {
	// In is the worker's request.
	In *http.Request
	// State is the dialect's state of the request, as Inspect returned
	// it: one request's, forwarded once.
	State *S
	// Token is the request's fencing token; 0 if it is not fenced.
	Token int64
	// Resource is the request's one fence key; "" if it has several.
	Resource string
	// Body is the request body, if the gateway read it whole; nil if it
	// streams (gateway.Request.Body).
	Body []byte
	// Route is the route the request came by.
	Route *gateway.Route
	// Version is the write's precondition bookkeeping; nil if untracked.
	Version *precondition.Write

	core *Core[S]
}

var (
	_ gateway.Upstream    = (*Core[struct{}])(nil)
	_ gateway.Inspector   = (*Core[struct{}])(nil)
	_ gateway.ErrorWriter = (*Core[struct{}])(nil)
	_ gateway.ObjectNamer = (*Core[struct{}])(nil)
)

// Options configure New.
type Options struct {
	// Tracker, if set, makes tracked writes conditional on the version
	// the gateway last wrote (`precondition: etag` or `generation`).
	Tracker *precondition.Tracker
	// EncodedSlashNames: the store names an object with one path segment,
	// its "/" sent as %2F (gateway.ObjectNamer).
	EncodedSlashNames bool
	// PinsVersion reports whether the worker's request pins a version
	// itself; its write is then not made conditional (a delayed request
	// cannot satisfy the worker's condition after a newer write either).
	// Nil: precondition.PinsVersion of its headers.
	PinsVersion func(r *http.Request) bool
}

// Core is an object-store upstream over a dialect. It implements
// gateway.Upstream, gateway.Inspector, gateway.ErrorWriter and
// gateway.ObjectNamer.
type Core[S any] struct {
	d            Dialect[S]
	tracker      *precondition.Tracker
	encodedSlash bool
	pins         func(r *http.Request) bool
}

// New returns the core over d.
func New[S any](d Dialect[S], opts Options) *Core[S] {
	c := &Core[S]{d: d, tracker: opts.Tracker, encodedSlash: opts.EncodedSlashNames, pins: opts.PinsVersion}
	if c.pins == nil {
		c.pins = func(r *http.Request) bool { return precondition.PinsVersion(r.Header) }
	}
	return c
}

// Tracker is the precondition bookkeeping of the route; nil if none.
func (c *Core[S]) Tracker() *precondition.Tracker { return c.tracker }

// EncodedSlashNames implements gateway.ObjectNamer.
func (c *Core[S]) EncodedSlashNames() bool { return c.encodedSlash }

// Inspect implements gateway.Inspector: the dialect's classification, its
// state handed to Forward by the gateway (Inspection.State).
func (c *Core[S]) Inspect(r *http.Request, token int64) (gateway.Inspection, error) {
	insp, s, err := c.d.Inspect(r, token)
	if err != nil {
		return gateway.Inspection{}, err
	}
	insp.State = s
	return insp, nil
}

// errNotInspected refuses a request the upstream did not inspect: only the
// gateway forwards, after Inspect, and a request that skipped it is not
// classified anew here (it would be classified by a second reading).
var errNotInspected = fencegate.Internal(errors.New("objectstore: a request reached Forward without this upstream's inspection"))

// Forward implements gateway.Upstream.
func (c *Core[S]) Forward(w http.ResponseWriter, r *http.Request, req *gateway.Request) error {
	s, ok := req.Inspected.(*S)
	if !ok || s == nil {
		return errNotInspected
	}
	f := &Forward[S]{In: r, State: s, Token: req.Token, Body: req.Body, Route: req.Route, core: c}
	if len(req.Resources) == 1 {
		f.Resource = req.Resources[0]
	}
	if err := c.d.Prepare(f); err != nil {
		return err
	}
	if err := c.begin(f); err != nil {
		return err
	}
	if g, ok := c.d.(Guard[S]); ok && f.Token > 0 {
		if err := g.Guard(f); err != nil {
			if f.Version != nil {
				f.Version.Failed(r.Context())
			}
			return err
		}
	}
	err := relay.Send(w, r, req, (*sending[S])(f))
	if err != nil && f.Version != nil {
		var ref *fencegate.Error
		if !errors.As(err, &ref) {
			// The request may or may not have reached the store.
			f.Version.Failed(r.Context())
		}
	}
	if fin, ok := c.d.(Finisher[S]); ok {
		err = fin.Finish(f, err)
	}
	return err
}

// begin loads the version the gateway last wrote to a fenced write's
// object and makes the write conditional on it (package precondition).
func (c *Core[S]) begin(f *Forward[S]) error {
	if f.Token <= 0 || c.tracker == nil || f.Resource == "" {
		return nil
	}
	kind, conditional, ok := c.d.Tracks(f)
	if !ok {
		return nil
	}
	conditional = conditional && !c.pins(f.In)
	v, err := c.tracker.Begin(f.In.Context(), f.Resource, f.Token, kind, conditional,
		func(ctx context.Context) (string, error) { return c.d.Version(ctx, f) })
	if err != nil {
		return err
	}
	f.Version = v
	return nil
}

// sending is a forward as relay.Send carries it: the dialect's rewrite
// and transport, given the forward.
type sending[S any] Forward[S]

// Rewrite prepares the outbound request: the dialect's rewrite. The
// token header is already gone (relay.Send removes it: the token is the
// gateway's decision, not the store's).
func (s *sending[S]) Rewrite(pr *httputil.ProxyRequest) {
	f := (*Forward[S])(s)
	f.core.d.Rewrite(pr, f)
}

// RoundTrip sends the forward through the dialect and records a tracked
// write's answer.
func (s *sending[S]) RoundTrip(out *http.Request) (*http.Response, error) {
	f := (*Forward[S])(s)
	resp, err := f.core.d.RoundTrip(out, f)
	if err != nil || f.Version == nil {
		return resp, err
	}
	ctx := out.Context()
	status, version, err := f.core.d.Answer(f, resp)
	switch {
	case err != nil:
		f.Version.Failed(ctx)
		return nil, err
	case status == 0:
		return resp, nil
	}
	if err := f.Version.Answered(ctx, status, version); err != nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, fencegate.MaxRefusalBody))
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// WriteError implements gateway.ErrorWriter: the one place a refusal of an
// object-store route is written. Its status and Retry-After come from the
// refusal, its body and Content-Type from the dialect.
func (c *Core[S]) WriteError(w http.ResponseWriter, r *http.Request, e *fencegate.Error) {
	WriteRefusal(w, r, e, c.d.RefusalBody)
}

// Vars are the template variables of one object: the collection's (the
// bucket, the container) and, unless object is "" (a write of the
// collection itself), the object's.
func Vars(collectionVar, collection, objectVar, object string) map[string]string {
	v := map[string]string{collectionVar: collection}
	if object != "" {
		v[objectVar] = object
	}
	return v
}

// Stamp is one object's fencing-token stamp, as `stamp: true` wrote it
// (collection: the bucket or container).
type Stamp struct {
	Collection, Object string
	Token              int64
}

// StampScan is what every dialect's stamp scan (`fence rebuild`) shares:
// an object without a stamp (written before stamping was on, or around
// the gateway) is counted, a malformed one is an error, not a guess.
type StampScan struct {
	Collection string
	Key        string // the stamp's metadata name, for messages
	Fn         func(Stamp) error
	// Unstamped counts the objects without a stamp.
	Unstamped int
}

// Object reads the stamp of one listed object: value, if it has one (ok).
func (s *StampScan) Object(name, value string, ok bool) error {
	if !ok {
		s.Unstamped++
		return nil
	}
	tok, err := strconv.ParseInt(value, 10, 64)
	if err != nil || tok <= 0 {
		return fmt.Errorf("object %s/%s: stamp %s: %q is not a token", s.Collection, name, s.Key, value)
	}
	return s.Fn(Stamp{Collection: s.Collection, Object: name, Token: tok})
}

// RaceTarget is a dialect's probe object for the racing probe: its
// conditional writes and reads (precondition.ProbeTarget), and its
// removal.
type RaceTarget interface {
	precondition.ProbeTarget
	Delete(ctx context.Context)
}

// ProbeRace runs the racing probe (precondition.Probe) on a probe object
// in collection (a bucket, a container), with the gateway's credentials:
// n conditional writes race to create it, then n to replace it, and a
// write on a wrong version must be refused. Exactly one of each round may
// win; anything else means the route's precondition gives no protection
// on this store. The object is removed before and after. An error names
// the collection as kind says ("bucket", "container"; "" names none).
func ProbeRace(ctx context.Context, kind, collection string, p RaceTarget, n int) error {
	p.Delete(ctx)
	defer p.Delete(context.WithoutCancel(ctx))
	err := precondition.Probe(ctx, p, n)
	if err != nil && kind != "" {
		return fmt.Errorf("%s %s: %w", kind, collection, err)
	}
	return err
}

// Fields are a refusal's fields as a store's error document carries them
// beside the store's own code and message (embedded: XML and JSON encode
// them in place).
type Fields struct {
	Resource string `xml:"Resource,omitempty" json:"resource,omitempty"`
	Token    int64  `xml:"Token,omitempty" json:"token,omitempty"`
	Highest  int64  `xml:"Highest,omitempty" json:"highest,omitempty"`
	Route    string `xml:"Route,omitempty" json:"route,omitempty"`
	Owner    string `xml:"Owner,omitempty" json:"owner,omitempty"`
}

// FieldsOf are e's fields.
func FieldsOf(e *fencegate.Error) Fields {
	return Fields{Resource: e.Resource, Token: e.Token, Highest: e.Highest, Route: e.Route, Owner: e.Owner}
}

// WriteRefusal writes e with a body in a store's format (body sets the
// Content-Type and the store's own headers).
func WriteRefusal(w http.ResponseWriter, r *http.Request, e *fencegate.Error, body func(http.Header, *fencegate.Error) []byte) {
	b := body(w.Header(), e)
	// Status, Retry-After and Cache-Control as every refusal has them.
	httprefusal.WriteHeader(w, e, w.Header().Get("Content-Type"))
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}
