package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// CheckCluster reports, for `fencegate doctor`, what a shared fence on
// this cluster rests on: its members, how many answer (a quorum decides
// every write), who leads, their versions, whether auth is on and whether
// the endpoints use TLS. It fails without a quorum or a leader, and when a
// member answers with a cluster ID of its own (endpoints of two clusters).
func (f *Store) CheckCluster(ctx context.Context) (lines []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	ml, err := f.client.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	n := len(ml.Members)
	up, leaders, clusters := 0, map[uint64]bool{}, map[uint64]bool{}
	for _, ep := range f.client.Endpoints() {
		f.requests.Add(1)
		st, err := f.client.Status(ctx, ep)
		if err != nil {
			lines = append(lines, fmt.Sprintf("endpoint %s: does not answer: %v", redact(ep), err))
			continue
		}
		up++
		leaders[st.Leader] = true
		clusters[st.Header.ClusterId] = true
		lines = append(lines, fmt.Sprintf("endpoint %s: etcd %s, member %x, leader %x, raft term %d", redact(ep), st.Version, st.Header.MemberId, st.Leader, st.RaftTerm))
	}
	lines = append(lines, fmt.Sprintf("%d members, %d of the configured endpoints answer (a quorum is %d)", n, up, n/2+1))
	f.requests.Add(1)
	if as, err := f.client.AuthStatus(ctx); err == nil {
		lines = append(lines, fmt.Sprintf("auth enabled: %t", as.Enabled))
	}
	tls := true
	for _, ep := range f.client.Endpoints() {
		if !strings.HasPrefix(ep, "https://") {
			tls = false
		}
	}
	lines = append(lines, fmt.Sprintf("TLS on every endpoint: %t", tls))
	switch {
	case len(clusters) > 1:
		return lines, fmt.Errorf("the endpoints belong to %d different clusters", len(clusters))
	case leaders[0] || len(leaders) == 0:
		return lines, fmt.Errorf("a member has no leader: the cluster cannot decide writes")
	case len(leaders) > 1:
		return lines, fmt.Errorf("members name %d different leaders (an election in progress?)", len(leaders))
	}
	// Every write needs a quorum: read linearizably to prove there is one.
	if err := f.Ping(ctx); err != nil {
		return lines, fmt.Errorf("no quorum answers a linearizable read: %w", err)
	}
	return lines, nil
}

// redact drops user info from an endpoint for a message.
func redact(ep string) string {
	u, err := url.Parse(ep)
	if err != nil {
		return "(unparsable endpoint)"
	}
	u.User = nil
	return u.String()
}
