package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"golang.org/x/oauth2"

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

// ObjectStore is one object-store dialect (adapters/objectstore) as the
// server builds its routes and as `fencegate doctor` and `fencegate fence
// rebuild` use them. Each is registered once, under its configuration
// section's kind (config.ObjectStore), in objectStores; BuildRoutes, the
// doctor and the rebuild look a route's dialect up there instead of
// switching on the kind.
type ObjectStore struct {
	// transport is the transport the dialect's routes share, made once
	// per BuildRoutes.
	transport func() http.RoundTripper
	// build builds the upstream of a route. With stores (serving), the
	// start checks of its precondition run first.
	build func(cfg *config.Config, rc config.Route, log *slog.Logger, transport http.RoundTripper, stores []gateway.Store) (gateway.Upstream, error)
	// Where is the flag of the doctor's probe place ("--bucket"), and for
	// a route the place its section configures and the field's name.
	Where      string
	checkWhere func(rc config.Route) (configured, field string)
	// doctor runs the dialect's probes in the place given (a bucket, a
	// container) and reports what it found.
	doctor func(ctx context.Context, cfg *config.Config, rc config.Route, where string) []Finding
	// scanner builds the route's upstream for `fence rebuild` (forwarding
	// no write: no precondition, no lease) and its stamp scanner.
	scanner func(ctx context.Context, cfg *config.Config, rc config.Route) (*StampScanner, error)
}

// objectStores are the registered dialects, by config.ObjectStore.Kind.
var objectStores = map[string]ObjectStore{
	"s3": {
		transport:  func() http.RoundTripper { return s3.NewTransport(nil) }, // small connection buffers
		build:      upstreamOf(newS3Upstream),
		Where:      "--bucket",
		checkWhere: func(rc config.Route) (string, string) { return rc.S3.CheckBucket, "s3.check_bucket" },
		doctor:     doctorS3,
		scanner:    s3Scanner,
	},
	"gcs": {
		transport:  func() http.RoundTripper { return gcs.NewTransport() }, // writes keep their connections
		build:      upstreamOf(newGCSUpstream),
		Where:      "--bucket",
		checkWhere: func(rc config.Route) (string, string) { return rc.GCS.CheckBucket, "gcs.check_bucket" },
		doctor:     doctorGCS,
		scanner:    gcsScanner,
	},
	"azure": {
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
		build:      upstreamOf(newAzureUpstream),
		Where:      "--container",
		checkWhere: func(rc config.Route) (string, string) { return rc.Azure.CheckContainer, "azure.check_container" },
		doctor:     doctorAzure,
		scanner:    azureScanner,
	},
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
	configured, field := o.checkWhere(rc)
	if configured == "" {
		return "", fmt.Sprintf("skipped (no %s and no %s)", o.Where, field)
	}
	return configured, ""
}

// Doctor runs the dialect's probes on the route in where.
func (o ObjectStore) Doctor(ctx context.Context, cfg *config.Config, rc config.Route, where string) []Finding {
	return o.doctor(ctx, cfg, rc, where)
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

// Scanner builds the route's stamp scanner.
func (o ObjectStore) Scanner(ctx context.Context, cfg *config.Config, rc config.Route) (*StampScanner, error) {
	return o.scanner(ctx, cfg, rc)
}

// nopETags satisfies the dialects' constructors where no write is
// forwarded (the doctor, the rebuild).
type nopETags struct{}

func (nopETags) LastETag(context.Context, string) (string, error)        { return "", nil }
func (nopETags) RecordETag(context.Context, string, int64, string) error { return nil }

func failed(err error) []Finding { return []Finding{{"FAIL", err.Error()}} }

func doctorS3(ctx context.Context, cfg *config.Config, rc config.Route, b string) []Finding {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	defer cancel()
	opts := S3Options(rc)
	opts.ETags = nopETags{}
	up, err := s3.New(cctx, opts)
	if err == nil {
		err = up.CheckConditionalWrites(cctx, b)
	}
	if err == nil {
		err = up.ProbeRace(cctx, b, 0)
	}
	var conds s3.Conditions
	if err == nil {
		conds, err = up.ProbeConditions(cctx, b, 0)
	}
	if err != nil {
		return failed(err)
	}
	out := []Finding{{"ok", fmt.Sprintf("%s honours If-Match and If-None-Match on PutObject, racing writes included (bucket %s)", config.RedactURL(rc.S3.Endpoint), b)}}
	conds.Each(func(op string, f s3.Finding) {
		if f.Honoured {
			out = append(out, Finding{"ok", op + " honoured: the gateway makes it conditional"})
		} else {
			out = append(out, Finding{"note", fmt.Sprintf("%s not honoured (%s): the gateway forwards it unconditioned; it is fenced, but a delayed one can still land", op, f.Detail)})
		}
	})
	return out
}

func doctorGCS(ctx context.Context, cfg *config.Config, rc config.Route, b string) []Finding {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	opts := GCSOptions(rc)
	opts.Generations = nopETags{}
	ts, err := gcs.Credentials(cctx, rc.GCS.CredentialsFile, rc.GCS.NoAuth)
	var up *gcs.Upstream
	if err == nil {
		opts.TokenSource = ts
		up, err = gcs.New(opts)
	}
	if err == nil {
		err = up.ProbeRace(cctx, b, 0)
	}
	cancel()
	endpoint := rc.GCS.StoreEndpoint()
	var out []Finding
	if err != nil {
		out = failed(err)
	} else {
		out = []Finding{{"ok", fmt.Sprintf("%s honours ifGenerationMatch on uploads, racing writes included (bucket %s)", config.RedactURL(endpoint), b)}}
	}
	// The probe is an objects.update of a probe name in bucket whose body
	// is itself a request; nothing is written.
	headers := map[string]string{}
	var terr error
	if ts != nil {
		var tok *oauth2.Token
		if tok, terr = ts.Token(); terr == nil {
			headers["Authorization"] = tok.Type() + " " + tok.AccessToken
		}
	}
	return append(out, unreadBody(ctx, "GCS", endpoint, "storage/v1/b/"+url.PathEscape(b)+"/o", headers, "bucket "+b, terr))
}

func doctorAzure(ctx context.Context, cfg *config.Config, rc config.Route, c string) []Finding {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	opts := AzureOptions(rc)
	opts.PreconditionETag, opts.LeaseGuard = false, false
	up, err := azure.New(opts)
	if err == nil {
		err = up.ProbeRace(cctx, c, 0)
	}
	cancel()
	var out []Finding
	if err != nil {
		out = failed(err)
	} else {
		out = []Finding{{"ok", fmt.Sprintf("%s honours If-Match and If-None-Match on Put Blob, racing writes included (container %s)", config.RedactURL(rc.Azure.Endpoint), c)}}
	}
	// The probe is an unsigned Put Blob of a probe name in container whose
	// body is itself a request: the store refuses it for want of
	// credentials, nothing is written, and the answer comes before the
	// body is needed, which is the case the probe is for.
	return append(out, unreadBody(ctx, "Azure", rc.Azure.Endpoint, url.PathEscape(c), nil, "container "+c, nil))
}

// unreadBody checks that the store reads (or discards) the body of a write
// it answers, or closes the connection: routes of kind keep their
// connections across writes, which is safe only then. err is an error met
// before the probe (its credentials).
func unreadBody(ctx context.Context, kind, endpoint, path string, headers map[string]string, where string, err error) Finding {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	defer cancel()
	f := relay.BodyRead
	if err == nil {
		f, err = relay.ProbeUnreadBody(cctx, endpoint, path, headers, nil)
	}
	up := config.RedactURL(endpoint)
	switch {
	case err != nil:
		return Finding{"FAIL", fmt.Sprintf("unread-body probe (%s): %v", where, err)}
	case f != relay.BodyRead:
		return Finding{"FAIL", fmt.Sprintf("%s answers a write without reading its body and takes the body for a request of its own; %s routes keep their connections across writes, so a worker's body could carry requests the fence never sees (%s)", up, kind, where)}
	}
	return Finding{"ok", fmt.Sprintf("%s reads a write's body (or closes the connection) before its next request: writes keep their connections (%s)", up, where)}
}

func s3Scanner(ctx context.Context, cfg *config.Config, rc config.Route) (*StampScanner, error) {
	opts := S3Options(rc)
	opts.ETags = nopETags{}
	up, err := s3.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &StampScanner{Upstream: up, Stamps: rc.S3.Stamp, Vars: up.ObjectVars, Scan: up.ScanStamps}, nil
}

func gcsScanner(ctx context.Context, cfg *config.Config, rc config.Route) (*StampScanner, error) {
	opts := GCSOptions(rc)
	opts.PreconditionGeneration = false // the rebuild forwards no write
	var err error
	if opts.TokenSource, err = gcs.Credentials(ctx, rc.GCS.CredentialsFile, rc.GCS.NoAuth); err != nil {
		return nil, err
	}
	up, err := gcs.New(opts)
	if err != nil {
		return nil, err
	}
	return &StampScanner{Upstream: up, Stamps: rc.GCS.Stamp, Vars: up.ObjectVars, Scan: up.ScanStamps}, nil
}

func azureScanner(ctx context.Context, cfg *config.Config, rc config.Route) (*StampScanner, error) {
	opts := AzureOptions(rc)
	opts.PreconditionETag = false // the rebuild forwards no write
	opts.LeaseGuard = false
	up, err := azure.New(opts)
	if err != nil {
		return nil, err
	}
	return &StampScanner{Upstream: up, Stamps: rc.Azure.Stamp, Vars: up.ObjectVars, Scan: up.ScanStamps}, nil
}

// upstreamOf turns a dialect's constructor into the registry's: its
// upstream as a gateway.Upstream, and no typed nil beside an error.
func upstreamOf[U gateway.Upstream](build func(*config.Config, config.Route, *slog.Logger, http.RoundTripper, []gateway.Store) (U, error)) func(*config.Config, config.Route, *slog.Logger, http.RoundTripper, []gateway.Store) (gateway.Upstream, error) {
	return func(cfg *config.Config, rc config.Route, log *slog.Logger, tr http.RoundTripper, stores []gateway.Store) (gateway.Upstream, error) {
		u, err := build(cfg, rc, log, tr, stores)
		if err != nil {
			return nil, err
		}
		return u, nil
	}
}
