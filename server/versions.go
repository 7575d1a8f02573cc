package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

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
