package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/fencegate/fencegate/adapters/azure"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

// AzureOptions maps a route's `azure:` section (which must be set),
// without the transport, the ETag store and the logger, which are the
// caller's.
func AzureOptions(rc config.Route) azure.Options {
	c := rc.Azure
	o := azure.Options{
		Route: rc.Name, Endpoint: c.Endpoint, Resource: rc.Resource,
		AccountName: c.AccountName, AccountKey: c.AccountKey, SAS: c.SAS,
		PreconditionETag: rc.Precondition == "etag",
		Stamp:            c.Stamp, StampKey: c.StampKey,
		LeaseGuard: c.LeaseGuard, LeaseSecret: []byte(c.LeaseSecret),
	}
	for _, cl := range c.Clients {
		o.Clients = append(o.Clients, azure.Client{AccountName: cl.AccountName, AccountKey: cl.AccountKey})
	}
	return o
}

// newAzureUpstream builds the upstream of an `azure:` route. ETags are
// recorded in the process's store. Serving (a store was given) with
// precondition etag and a check_container, the racing probe runs first: a
// store that ignores If-Match would turn the guarantee into a silent
// no-op.
func newAzureUpstream(cfg *config.Config, rc config.Route, log *slog.Logger, transport http.RoundTripper, stores []gateway.Store) (*azure.Upstream, error) {
	opts := AzureOptions(rc)
	opts.Transport = transport
	opts.Logger = log.With("component", "azure", "route", rc.Name)
	if rc.Precondition == "etag" {
		opts.ETags = etagStore(stores)
	}
	up, err := azure.New(opts)
	if err != nil {
		return nil, err
	}
	if len(stores) > 0 && rc.Precondition == "etag" && rc.Azure.CheckContainer != "" {
		ctx, cancel := context.WithTimeout(context.Background(), precondition.ProbeTimeout)
		defer cancel()
		if err := up.ProbeRace(ctx, rc.Azure.CheckContainer, 0); err != nil {
			return nil, fmt.Errorf("precondition etag: %w", err)
		}
	}
	return up, nil
}
