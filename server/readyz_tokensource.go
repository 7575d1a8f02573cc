package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/adapters/postgres"
)

// raisedCheckEvery is how long /readyz reuses its look for token-source
// fences a recovery raised (a scan of the fences a recovery wrote last).
const raisedCheckEvery = 30 * time.Second

// raisedFences caches raisedTokenSourceFences' finding.
type raisedFences struct {
	mu  sync.Mutex
	at  time.Time
	msg string // for the probe's answer
	log string // msg with the resources, for the log
}

// raisedTokenSourceFences is why /readyz is not ready while a route whose
// tokens come from etcd or ZooKeeper refuses every holder of a resource: a
// store recovery raised its fence to the floor of the coordinator's
// sequence (a recovery made before such routes were left alone), which
// that service's tokens never reach. "" if none, or nothing to look at.
func (s *Server) raisedTokenSourceFences(ctx context.Context) (msg, detail string) {
	st, ok := s.pinger.(*postgres.Store)
	if !ok {
		return "", ""
	}
	ts := &s.tokenSources
	ts.mu.Lock()
	n := len(ts.routes)
	ts.mu.Unlock()
	if n == 0 {
		return "", ""
	}
	rf := &s.raised
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if !rf.at.IsZero() && time.Since(rf.at) < raisedCheckEvery {
		return rf.msg, rf.log
	}
	res, err := st.RaisedForeign(ctx, func(r string) bool { return s.foreignSource(r) != "" }, 3)
	if err != nil {
		return "", "" // the store's own check reports it
	}
	rf.at, rf.msg, rf.log = time.Now(), "", ""
	if len(res) > 0 {
		rf.msg = fmt.Sprintf("a store recovery raised fences of %s to the coordinator's token floor, which its lock service's tokens never reach: "+
			"every holder is refused there; reset those fences (docs/recovery.md)", s.foreignSource(res[0]))
		rf.log = rf.msg + "; resources: " + strings.Join(res, ", ")
	}
	return rf.msg, rf.log
}
