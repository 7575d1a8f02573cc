package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/s3"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

// newS3Upstream builds the upstream of an `s3:` route. ETags are recorded in
// the process's store when it can keep them (bolt and postgres can).
func newS3Upstream(cfg *config.Config, rc config.Route, log *slog.Logger, transport http.RoundTripper, stores []gateway.Store) (*s3.Upstream, error) {
	opts := S3Options(rc)
	opts.Transport = transport
	opts.Logger = log.With("component", "s3", "route", rc.Name)
	if rc.Precondition == "etag" {
		opts.ETags = etagStore(stores)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	up, err := s3.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	// Serving (a store was given) with precondition etag: check at start
	// that the upstream really refuses failed preconditions; a store that
	// ignores them would turn the guarantee into a silent no-op.
	if len(stores) > 0 && rc.Precondition == "etag" && rc.S3.CheckBucket != "" {
		if err := up.CheckConditionalWrites(ctx, rc.S3.CheckBucket); err != nil {
			return nil, fmt.Errorf("precondition etag: %w", err)
		}
		if err := up.ProbeRace(ctx, rc.S3.CheckBucket, 0); err != nil {
			return nil, fmt.Errorf("precondition etag: %w", err)
		}
		// Delete and copy conditions: used where the store honours them,
		// the operation forwarded unconditioned (still fenced) where not.
		c, err := up.ProbeConditions(ctx, rc.S3.CheckBucket, 0)
		if err != nil {
			return nil, fmt.Errorf("precondition etag: %w", err)
		}
		c.Each(func(op string, f s3.Finding) {
			if f.Honoured {
				log.Info("upstream honours conditional "+op, "route", rc.Name)
			} else {
				log.Warn("upstream does not honour "+op+": forwarded unconditioned (fenced, but a delayed one can land)", "route", rc.Name, "cause", f.Detail)
			}
		})
	}
	return up, nil
}

// checkHTTPUpstream runs the racing probe at start (a store was given:
// serving) on an HTTP route with precondition etag and upstream.check_path:
// an upstream that ignores or races conditional writes would turn the
// guarantee into a silent no-op.
func checkHTTPUpstream(rc config.Route, h *relay.Upstream, stores []gateway.Store) error {
	if len(stores) == 0 || rc.Precondition != "etag" || rc.Upstream.CheckPath == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), precondition.ProbeTimeout)
	defer cancel()
	if err := h.CheckConditionalWrites(ctx, rc.Upstream.CheckPath, 0); err != nil {
		return fmt.Errorf("precondition etag: %w", err)
	}
	return nil
}

// etagStore returns the process's store as the ETag record of
// `precondition: etag` routes (bolt and postgres keep ETags on their fence
// records). `fencegate validate` builds routes without a store; the
// upstream only needs one to serve.
func etagStore(stores []gateway.Store) precondition.Store {
	for _, st := range stores {
		if e, ok := st.(precondition.Store); ok {
			return e
		}
	}
	return noETags{}
}

// noETags stands in for the store where routes are only compiled.
type noETags struct{}

func (noETags) LastETag(context.Context, string) (string, error)        { return "", errNoStore }
func (noETags) RecordETag(context.Context, string, int64, string) error { return errNoStore }

var errNoStore = errors.New("no store to record ETags in")
