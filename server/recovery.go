package server

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
)

// newLocalFence builds the local fence over store. When the store keeps a
// serving record (both the embedded store and PostgreSQL do) and this
// process runs a gateway, the fence keeps it and, after a crash, waits out
// only the predecessor's writes that a newer write could overtake
// (docs/design.md, "After a crash (local fence)").
func (s *Server) newLocalFence(cfg *config.Config, store gateway.Store, opts gateway.LocalFenceOptions) (*gateway.LocalFence, error) {
	sv, ok := store.(gateway.ServingStore)
	if !ok || cfg.Gateway == nil {
		return gateway.NewLocalFence(s.tel.Store(store), opts), nil
	}
	log := s.log.With("component", "fence")
	opts.Serving = sv
	opts.ForwardBound = maxForwardBound(cfg)
	opts.RecoveryBound = recoveryBound(cfg)
	opts.OnRecoveryWait = s.tel.RecoveryWaited
	opts.OnRecoveryEnd = func(waited int) {
		log.Info("recovery ended: writes a crashed process may have left in flight have all ended", "writes_waited", waited)
	}
	opts.Log = log.Warn
	lf := gateway.NewLocalFence(s.tel.Store(store), opts)
	ctx, cancel := context.WithTimeout(context.Background(), fencegate.DefaultStoreTimeout)
	defer cancel()
	st, err := lf.Begin(ctx)
	if err != nil {
		return nil, err
	}
	s.localFence = lf
	s.watchRecovery(lf.Recovery)
	if st.Recovering {
		log.Warn("the previous process stopped with writes possibly in flight (a crash): a write that could overtake one of them waits until it has ended, at most its route's forward bound",
			"until", st.Until.UTC().Format(time.RFC3339), "longest_wait", time.Until(st.Until).Round(time.Millisecond).String())
	}
	return lf, nil
}

// watchRecovery makes status the fence's recovery for /readyz, the
// console and fencegate_recovering.
func (s *Server) watchRecovery(status func() gateway.RecoveryStatus) {
	s.recovery = status
	s.tel.Recovering(func() float64 {
		if status().Recovering {
			return 1
		}
		return 0
	})
}

// recovering describes a recovery under way for /readyz and the console
// ("" if none).
func (s *Server) recovering() string {
	if s.recovery == nil {
		return ""
	}
	st := s.recovery()
	if !st.Recovering {
		return ""
	}
	return fmt.Sprintf("recovering until %s, %d resources held: %s",
		st.Until.UTC().Format(time.RFC3339), st.Held, st.Reason)
}

// routeBound is how long a write of rc stays in flight at most: its
// upstream timeout, and the margin of the connection's teardown.
func routeBound(rc *config.Route) time.Duration {
	return rc.UpstreamTimeout() + fencegate.DrainMargin
}

// maxForwardBound is the longest routeBound of cfg's routes.
func maxForwardBound(cfg *config.Config) time.Duration {
	var d time.Duration
	for i := range cfg.Gateway.Routes {
		d = max(d, routeBound(&cfg.Gateway.Routes[i]))
	}
	return d
}

// recoveryBound returns, for a resource, the longest routeBound of the
// routes that could produce its key (config.Route.MayProduceKey, a
// conservative judgement); a key no route produces gets the longest of all.
func recoveryBound(cfg *config.Config) func(resource string) time.Duration {
	longest := maxForwardBound(cfg)
	routes := cfg.Gateway.Routes
	return func(resource string) time.Duration {
		var d time.Duration
		for i := range routes {
			if routes[i].MayProduceKey(resource) {
				d = max(d, routeBound(&routes[i]))
			}
		}
		if d == 0 {
			return longest
		}
		return d
	}
}
