package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate/adapters/azure"
	"github.com/fencegate/fencegate/adapters/gcs"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/s3"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

// This file is the registry of the object-store dialects
// (adapters/objectstore): each is one entry of objectStores, under its
// configuration section's kind (config.ObjectStore), with what the server
// needs of it. BuildRoutes, `fencegate doctor` and `fence rebuild` look a
// route's dialect up here and do the rest the same way for every store:
// the start checks, the doctor's findings and the stamp scan below hold
// no store's name. A fourth dialect is a package behind the core, its
// section in config and an entry here.

// ObjectStore is one object-store dialect as the server builds its routes
// and as `fencegate doctor` and `fencegate fence rebuild` use them.
type ObjectStore struct {
	// transport is the transport the dialect's routes share, made once
	// per BuildRoutes.
	transport func() http.RoundTripper
	// open builds the upstream of a route from its section.
	open func(ctx context.Context, rc config.Route, o storeOptions) (storeUpstream, error)
	// name is the store's name in messages ("GCS").
	name string
	// Where is the flag of the doctor's probe place ("--bucket"); without
	// its dashes it names the place in findings ("bucket b").
	Where string
	// honours says what the racing probe found the store to honour, for
	// the doctor's line ("ifGenerationMatch on uploads").
	honours string
	// probe, if set, runs the dialect's probes in place of the racing
	// probe alone and returns the conditional operations it measured
	// (S3: conditional PutObject first, then the race, then the
	// conditions of deletes and copies).
	probe func(ctx context.Context, up storeUpstream, where string) ([]condition, error)
	// unreadBody, if set, is the request of the unread-body probe in where
	// (the dialect's routes keep their connections across writes, which is
	// safe only if the store reads a body it answers without): its path
	// under the endpoint and its headers. err is an error met before the
	// probe (its credentials).
	unreadBody func(ctx context.Context, rc config.Route, where string) (path string, headers map[string]string, err error)
}

// storeOptions is what the server gives a dialect's constructor besides
// the route's section.
type storeOptions struct {
	Transport http.RoundTripper // nil: the dialect's own
	Logger    *slog.Logger
	// Forwards: the upstream forwards writes (BuildRoutes). False: the
	// doctor and the rebuild, which forward none, need no precondition
	// and take no lease.
	Forwards bool
	// Versions records the version of each tracked write: the route's
	// precondition is on. Nil: off.
	Versions precondition.Store
}

// storeUpstream is a dialect's upstream as the server uses it besides
// forwarding: its racing probe, its stamp scan and its template
// variables.
type storeUpstream interface {
	gateway.Upstream
	// ProbeRace runs the racing probe (objectstore.ProbeRace) in a bucket
	// or container.
	ProbeRace(ctx context.Context, where string, n int) error
	// ScanStamps lists collection under prefix and calls fn with each
	// stamped object; it counts the objects without a stamp.
	ScanStamps(ctx context.Context, collection, prefix string, fn func(objectstore.Stamp) error) (unstamped int, err error)
	// ObjectVars are the template variables of one object.
	ObjectVars(collection, object string) map[string]string
}

// condition is one conditional form of an operation that a dialect's
// probe measured on the store.
type condition struct {
	op       string
	honoured bool
	detail   string // what the probe saw, if not honoured
}

// objectStores are the registered dialects, by config.ObjectStore.Kind.
var objectStores = map[string]ObjectStore{
	"s3": {
		name:      "S3",
		transport: func() http.RoundTripper { return objectstore.NewTransport(nil) }, // small connection buffers
		open:      openS3,
		Where:     "--bucket",
		honours:   "If-Match and If-None-Match on PutObject",
		probe:     probeS3,
	},
	"gcs": {
		name:      "GCS",
		transport: func() http.RoundTripper { return gcs.NewTransport() }, // writes keep their connections
		open:      openGCS,
		Where:     "--bucket",
		honours:   "ifGenerationMatch on uploads",
		// The probe is an objects.update of a probe name in the bucket
		// whose body is itself a request; nothing is written.
		unreadBody: func(ctx context.Context, rc config.Route, b string) (string, map[string]string, error) {
			headers := map[string]string{}
			ts, err := gcs.Credentials(ctx, rc.GCS.CredentialsFile, rc.GCS.NoAuth)
			if err == nil && ts != nil {
				tok, terr := ts.Token()
				if err = terr; err == nil {
					headers["Authorization"] = tok.Type() + " " + tok.AccessToken
				}
			}
			return "storage/v1/b/" + url.PathEscape(b) + "/o", headers, err
		},
	},
	"azure": {
		name: "Azure",
		// The store's front ends and Azurite (Node's HTTP parser frames
		// every body whether or not the handler reads it) never take a
		// body for a request, and fencegate doctor checks it (the
		// unread-body probe). Closing after each write cost a connection
		// per blob: a 4 KiB Put Blob through the gateway at about 80% of
		// direct Azurite, 92–93% with its connection kept.
		transport: func() http.RoundTripper {
			t := upstreamconn.NewTransport(relay.NewTransport(nil))
			t.KeepBodies = true
			return t
		},
		open:    openAzure,
		Where:   "--container",
		honours: "If-Match and If-None-Match on Put Blob",
		// The probe is an unsigned Put Blob of a probe name in the
		// container whose body is itself a request: the store refuses it
		// for want of credentials, nothing is written, and the answer
		// comes before the body is needed, which is the case the probe is
		// for.
		unreadBody: func(_ context.Context, _ config.Route, c string) (string, map[string]string, error) {
			return url.PathEscape(c), nil, nil
		},
	},
}

// spec is what every dialect takes of the route (its stamp's name is
// the dialect's).
func (o storeOptions) spec(rc config.Route, stampKey string) objectstore.Spec {
	sec := rc.ObjectStore()
	return objectstore.Spec{
		Route: rc.Name, Endpoint: sec.StoreEndpoint(), Resource: rc.Resource,
		Precondition: o.Versions != nil, Versions: o.Versions,
		Stamp: sec.Stamps(), StampKey: stampKey,
		Transport: o.Transport, Logger: o.Logger,
	}
}

// openS3 maps a route's `s3:` section.
func openS3(ctx context.Context, rc config.Route, o storeOptions) (storeUpstream, error) {
	c := rc.S3
	opts := s3.Options{
		Spec:   o.spec(rc, c.StampHeader),
		Region: c.Region, AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey,
		VirtualHostSuffix: c.VirtualHostSuffix,
		FenceBucketConfig: c.BucketConfig == "fence",
		FoldTrailingSlash: c.FoldTrailingSlash,
	}
	for _, cl := range c.Clients {
		opts.Clients = append(opts.Clients, s3.Client{AccessKeyID: cl.AccessKeyID, SecretAccessKey: cl.SecretAccessKey})
	}
	return opened(s3.New(ctx, opts))
}

// probeS3 checks that PutObject's conditions are honoured (some
// S3-compatible stores accept and ignore them), races them, and measures
// the conditions of deletes and copies: the gateway uses them where the
// store honours them and forwards the operation unconditioned (still
// fenced) where not.
func probeS3(ctx context.Context, up storeUpstream, b string) ([]condition, error) {
	u := up.(*s3.Upstream)
	if err := u.CheckConditionalWrites(ctx, b); err != nil {
		return nil, err
	}
	if err := u.ProbeRace(ctx, b, 0); err != nil {
		return nil, err
	}
	conds, err := u.ProbeConditions(ctx, b, 0)
	if err != nil {
		return nil, err
	}
	var out []condition
	conds.Each(func(op string, f s3.Finding) { out = append(out, condition{op, f.Honoured, f.Detail}) })
	return out, nil
}

// openGCS maps a route's `gcs:` section, with the gateway's credentials.
func openGCS(ctx context.Context, rc config.Route, o storeOptions) (storeUpstream, error) {
	c := rc.GCS
	ts, err := gcs.Credentials(ctx, c.CredentialsFile, c.NoAuth)
	if err != nil {
		return nil, err
	}
	return opened(gcs.New(gcs.Options{Spec: o.spec(rc, c.StampKey), TokenSource: ts, SessionKey: []byte(c.SessionKey)}))
}

// openAzure maps a route's `azure:` section.
func openAzure(ctx context.Context, rc config.Route, o storeOptions) (storeUpstream, error) {
	c := rc.Azure
	opts := azure.Options{
		Spec:        o.spec(rc, c.StampKey),
		AccountName: c.AccountName, AccountKey: c.AccountKey, SAS: c.SAS,
		LeaseGuard: c.LeaseGuard && o.Forwards, LeaseSecret: []byte(c.LeaseSecret),
	}
	for _, cl := range c.Clients {
		opts.Clients = append(opts.Clients, azure.Client{AccountName: cl.AccountName, AccountKey: cl.AccountKey})
	}
	return opened(azure.New(opts))
}

// opened is a dialect's upstream as a storeUpstream: no typed nil beside
// an error.
func opened[U storeUpstream](u U, err error) (storeUpstream, error) {
	if err != nil {
		return nil, err
	}
	return u, nil
}

// ObjectStoreNames names the registered dialects for messages and help,
// in the order of config's sections: "S3, GCS or Azure" (conj "or"). A
// where other than "" keeps those whose probe place is that flag
// ("--bucket": "S3 or GCS").
func ObjectStoreNames(conj, where string) string {
	var names []string
	for _, kind := range config.ObjectStoreKinds() {
		if o, ok := objectStores[kind]; ok && (where == "" || o.Where == where) {
			names = append(names, o.name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}

// ObjectStoreOf is the registered dialect of the route's object-store
// section; false if it has none.
func ObjectStoreOf(rc config.Route) (ObjectStore, bool) {
	s := rc.ObjectStore()
	if s == nil {
		return ObjectStore{}, false
	}
	o, ok := objectStores[s.Kind()]
	return o, ok
}

// build builds the upstream of an object-store route. Versions are
// recorded in the process's store (bolt and postgres keep them on their
// fence records). Serving (a store was given) with the route's
// precondition on and a probe place (check_bucket, check_container), the
// dialect's probes run first: a store that ignores the conditions would
// turn the guarantee into a silent no-op.
func (o ObjectStore) build(rc config.Route, log *slog.Logger, transport http.RoundTripper, stores []gateway.Store) (gateway.Upstream, error) {
	sec := rc.ObjectStore()
	opts := storeOptions{Transport: transport, Logger: log.With("component", sec.Kind(), "route", rc.Name), Forwards: true}
	on := rc.Precondition == sec.Precondition()
	if on {
		opts.Versions = etagStore(stores)
	}
	ctx, cancel := context.WithTimeout(context.Background(), precondition.ProbeTimeout)
	defer cancel()
	up, err := o.open(ctx, rc, opts)
	if err != nil {
		return nil, err
	}
	if where, _ := sec.CheckIn(); len(stores) > 0 && on && where != "" {
		conds, err := o.runProbe(ctx, up, where)
		if err != nil {
			return nil, fmt.Errorf("precondition %s: %w", sec.Precondition(), err)
		}
		for _, c := range conds {
			if c.honoured {
				log.Info("upstream honours conditional "+c.op, "route", rc.Name)
			} else {
				log.Warn("upstream does not honour "+c.op+": forwarded unconditioned (fenced, but a delayed one can land)", "route", rc.Name, "cause", c.detail)
			}
		}
	}
	return up, nil
}

// runProbe runs the dialect's probes in where: the racing probe, unless
// the dialect has probes of its own.
func (o ObjectStore) runProbe(ctx context.Context, up storeUpstream, where string) ([]condition, error) {
	if o.probe != nil {
		return o.probe(ctx, up, where)
	}
	return nil, up.ProbeRace(ctx, where, 0)
}

// Finding is one line of what the doctor found on a route.
type Finding struct {
	// Word is "ok", "note" or "FAIL".
	Word string
	Text string
}

// Failed reports whether the finding fails the route.
func (f Finding) Failed() bool { return f.Word == "FAIL" }

// CheckWhere is where the doctor probes the route: the flag's value, else
// the place its section configures; "" and the skip line if neither.
func (o ObjectStore) CheckWhere(rc config.Route, flagValue string) (where, skipped string) {
	if flagValue != "" {
		return flagValue, ""
	}
	configured, field := rc.ObjectStore().CheckIn()
	if configured == "" {
		return "", fmt.Sprintf("skipped (no %s and no %s)", o.Where, field)
	}
	return configured, ""
}

// Doctor runs the dialect's probes on the route in where (a bucket, a
// container) and reports what it found. The upstream is built as the
// rebuild builds it: it forwards no write.
func (o ObjectStore) Doctor(ctx context.Context, rc config.Route, where string) []Finding {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	up, err := o.open(cctx, rc, storeOptions{})
	var conds []condition
	if err == nil {
		conds, err = o.runProbe(cctx, up, where)
	}
	cancel()
	endpoint := config.RedactURL(rc.ObjectStore().StoreEndpoint())
	var out []Finding
	if err != nil {
		out = []Finding{{"FAIL", err.Error()}}
	} else {
		out = []Finding{{"ok", fmt.Sprintf("%s honours %s, racing writes included (%s %s)", endpoint, o.honours, o.Where[2:], where)}}
	}
	for _, c := range conds {
		if c.honoured {
			out = append(out, Finding{"ok", c.op + " honoured: the gateway makes it conditional"})
		} else {
			out = append(out, Finding{"note", fmt.Sprintf("%s not honoured (%s): the gateway forwards it unconditioned; it is fenced, but a delayed one can still land", c.op, c.detail)})
		}
	}
	if o.unreadBody != nil {
		out = append(out, o.doctorUnreadBody(ctx, rc, where))
	}
	return out
}

// doctorUnreadBody checks that the store reads (or discards) the body of
// a write it answers, or closes the connection: the dialect's routes keep
// their connections across writes, which is safe only then.
func (o ObjectStore) doctorUnreadBody(ctx context.Context, rc config.Route, where string) Finding {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	defer cancel()
	endpoint := rc.ObjectStore().StoreEndpoint()
	place := o.Where[2:] + " " + where
	path, headers, err := o.unreadBody(cctx, rc, where)
	f := relay.BodyRead
	if err == nil {
		f, err = relay.ProbeUnreadBody(cctx, endpoint, path, headers, nil)
	}
	up := config.RedactURL(endpoint)
	switch {
	case err != nil:
		return Finding{"FAIL", fmt.Sprintf("unread-body probe (%s): %v", place, err)}
	case f != relay.BodyRead:
		return Finding{"FAIL", fmt.Sprintf("%s answers a write without reading its body and takes the body for a request of its own; %s routes keep their connections across writes, so a worker's body could carry requests the fence never sees (%s)", up, o.name, place)}
	}
	return Finding{"ok", fmt.Sprintf("%s reads a write's body (or closes the connection) before its next request: writes keep their connections (%s)", up, place)}
}

// StampScanner is an object-store route as `fence rebuild` reads it.
type StampScanner struct {
	// Upstream is the route's upstream (its resource keys).
	Upstream gateway.Upstream
	// Stamps: the route writes stamps (its section's stamp: true).
	Stamps bool
	// Vars are the template variables of one object.
	Vars func(collection, object string) map[string]string
	// Scan lists collection under prefix and calls fn with each stamped
	// object; it counts the objects without a stamp.
	Scan func(ctx context.Context, collection, prefix string, fn func(objectstore.Stamp) error) (unstamped int, err error)
}

// Scanner builds the route's stamp scanner: its upstream forwarding no
// write (no precondition, no lease).
func (o ObjectStore) Scanner(ctx context.Context, rc config.Route) (*StampScanner, error) {
	up, err := o.open(ctx, rc, storeOptions{})
	if err != nil {
		return nil, err
	}
	return &StampScanner{Upstream: up, Stamps: rc.ObjectStore().Stamps(), Vars: up.ObjectVars, Scan: up.ScanStamps}, nil
}
