package objectstore

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/fencegate/fencegate/precondition"
)

// Spec is what every dialect's constructor takes of its route besides the
// store's own settings (its credentials, its options): each dialect's
// Options embeds it.
type Spec struct {
	// Route names the route in logs.
	Route string
	// Endpoint is the store's base URL, an absolute http or https URL.
	Endpoint string
	// Resource is the route's resource template.
	Resource string
	// Precondition makes every tracked write conditional on the version
	// the gateway last wrote (`precondition: etag`, `generation`); it
	// needs Versions and a Resource naming one object.
	Precondition bool
	// Versions records the version of each object's last write (the bolt
	// and postgres stores keep them on their fence records).
	Versions precondition.Store
	// Stamp writes each admitted write's token into the object's metadata
	// under StampKey (empty: the dialect's default name).
	Stamp    bool
	StampKey string
	// Transport carries upstream requests. Nil: the dialect's own.
	Transport http.RoundTripper
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock the dialect checks signatures against. Nil:
	// time.Now.
	Now func() time.Time
}

// Log is the spec's logger.
func (s *Spec) Log() *slog.Logger { return cmp.Or(s.Logger, slog.Default()) }

// Clock is the spec's clock.
func (s *Spec) Clock() func() time.Time {
	if s.Now == nil {
		return time.Now
	}
	return s.Now
}

// Tracker is the bookkeeping of the route's precondition (name is the
// option's value, "etag"; upstream names the store in logs): nil if it is
// off. A version is one object's, so the route's resource template must
// name one object (collection and object, its dialect's variables); and
// the versions need a store.
func (s *Spec) Tracker(name, upstream, collection, object string) (*precondition.Tracker, error) {
	switch {
	case !s.Precondition:
		return nil, nil
	case !strings.Contains(s.Resource, "{"+collection+"}") || !strings.Contains(s.Resource, "{"+object+"}"):
		// A resource spanning several objects (a bucket, a key prefix) has
		// no one version to compare.
		return nil, fmt.Errorf("precondition: %s needs a resource template naming one object, with {%s} and {%s}", name, collection, object)
	case s.Versions == nil:
		return nil, fmt.Errorf("precondition: %s needs a store that records versions", name)
	}
	return &precondition.Tracker{Store: s.Versions, Route: s.Route, Upstream: upstream, Log: s.Log()}, nil
}
