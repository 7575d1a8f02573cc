package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"
)

// etcdTarget is one etcd cluster the configuration uses: a token source
// (and, once wired, store.etcd), named for doctor's lines.
type etcdTarget struct {
	label string
	opts  etcd.ClientOptions
}

// etcdTargets are the etcd clusters cfg uses: store.etcd's, then the
// distinct clusters of its token sources.
func etcdTargets(cfg *config.Config) []etcdTarget {
	var ts []etcdTarget
	seen := map[string]bool{}
	if cfg.Gateway == nil {
		return nil
	}
	if e := cfg.Store.Etcd; e != nil {
		ts = append(ts, etcdTarget{"store.etcd", server.EtcdClientOptions(e.Endpoints, e.Username, e.Password, e.TLS)})
	}
	for _, r := range cfg.Gateway.Routes {
		e := r.TokenSource
		if e == nil || e.Etcd == nil || seen[e.Identity()] {
			continue
		}
		seen[e.Identity()] = true
		ts = append(ts, etcdTarget{"token_source etcd (route " + r.Name + ")",
			server.EtcdClientOptions(e.Etcd.Endpoints, e.Etcd.Username, e.Etcd.Password, e.Etcd.TLS)})
	}
	return ts
}

// Below these doctor warns: etcd before 3.5 is out of support, and a
// server certificate that expires within the margin will stop the gateway
// unless it is renewed.
const (
	etcdMinVersion   = "3.5.0"
	etcdCertMargin   = 14 * 24 * time.Hour
	etcdCheckTimeout = 10 * time.Second
)

// etcdReport is what doctor found of one cluster.
type etcdReport struct {
	Voters, Learners int
	// Healthy are the voting members that answered a status request.
	Healthy int
	// Down names the voting members that did not.
	Down []string
	// Leader is the leader's member name ("" none seen).
	Leader string
	// MinVersion is the lowest server version that answered.
	MinVersion string
	Auth       bool
	Alarms     []string
}

// checkEtcd checks the cluster of o and writes one line per finding to w,
// each "label: ok|warn|FAIL: ...": the members and their quorum (a
// majority of the voting members answering), the leader, the lowest
// version, authentication, TLS on each endpoint (the server certificate's
// expiry), alarms (NOSPACE: no write succeeds) and the database's size.
// It returns an error when a FAIL line was written: without quorum, a
// leader or space, no fence can be raised.
func checkEtcd(ctx context.Context, w io.Writer, label string, o etcd.ClientOptions) (etcdReport, error) {
	var rep etcdReport
	fails := 0
	say := func(word, format string, args ...any) {
		if word == "FAIL" {
			fails++
		}
		fmt.Fprintf(w, "%s: %s: %s\n", label, word, fmt.Sprintf(format, args...))
	}
	result := func() (etcdReport, error) {
		if fails > 0 {
			return rep, fmt.Errorf("%s: %d check(s) failed", label, fails)
		}
		return rep, nil
	}
	cfg, err := etcd.ClientConfig(o)
	if err != nil {
		say("FAIL", "%v", err)
		return result()
	}
	ctx, cancel := context.WithTimeout(ctx, etcdCheckTimeout)
	defer cancel()
	checkEtcdTransport(ctx, cfg, say)
	cli, err := clientv3.New(cfg)
	if err != nil {
		say("FAIL", "%v", etcd.Explain(context.WithoutCancel(ctx), cfg, err))
		return result()
	}
	defer cli.Close()

	// A linearizable member list needs a quorum; a serializable one, any
	// member, to name the members when the quorum is lost.
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	ml, quorumErr := cli.MemberList(lctx)
	lcancel()
	if quorumErr != nil {
		var err error
		lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
		ml, err = cli.MemberList(lctx, clientv3.WithSerializable())
		lcancel()
		if err != nil {
			say("FAIL", "no member answers: %v", etcd.Explain(context.WithoutCancel(ctx), cfg, quorumErr))
			return result()
		}
	}
	// By name, as operators list them (etcd answers by member ID).
	slices.SortFunc(ml.Members, func(a, b *etcdserverpb.Member) int { return strings.Compare(a.Name, b.Name) })
	leaders := map[uint64]bool{}
	var names []string
	dbSize, dbInUse := int64(0), int64(0)
	for _, m := range ml.Members {
		name := m.Name
		if name == "" {
			name = strconv.FormatUint(m.ID, 16) + " (not started)"
		}
		names = append(names, name)
		if m.IsLearner {
			rep.Learners++
			continue
		}
		rep.Voters++
		st := etcdMemberStatus(ctx, cli, m.ClientURLs)
		if st == nil {
			rep.Down = append(rep.Down, name)
			continue
		}
		rep.Healthy++
		leaders[st.Leader] = true
		if rep.MinVersion == "" || versionLess(st.Version, rep.MinVersion) {
			rep.MinVersion = st.Version
		}
		dbSize, dbInUse = max(dbSize, st.DbSize), max(dbInUse, st.DbSizeInUse)
	}
	need := rep.Voters/2 + 1
	members := fmt.Sprintf("%d voting member(s) (%s)", rep.Voters, strings.Join(names, ", "))
	if rep.Learners > 0 {
		members += fmt.Sprintf(", %d learner(s)", rep.Learners)
	}
	switch {
	case rep.Healthy < need || quorumErr != nil:
		say("FAIL", "quorum lost: %d of %s answer, %d needed (down: %s): no fence can be raised or read, the gateways refuse fenced writes (503)",
			rep.Healthy, members, need, strings.Join(rep.Down, ", "))
	case len(rep.Down) > 0:
		say("warn", "%s, %d answer (down: %s): quorum holds (%d needed), %d more loss(es) stop every fenced write",
			members, rep.Healthy, strings.Join(rep.Down, ", "), need, rep.Healthy-need+1)
	case rep.Voters < 3:
		say("warn", "%s: a cluster of fewer than 3 members survives no member's loss (docs/operations.md)", members)
	default:
		say("ok", "%s, all answer: quorum %d, %d loss(es) tolerated", members, need, rep.Voters-need)
	}
	delete(leaders, 0)
	switch {
	case len(leaders) == 0:
		if rep.Healthy > 0 {
			say("FAIL", "no leader: the answering members are in an election or cut off from each other")
		}
	case len(leaders) > 1:
		say("warn", "the members name different leaders (an election under way): run doctor again")
	default:
		for id := range leaders {
			rep.Leader = strconv.FormatUint(id, 16)
			for _, m := range ml.Members {
				if m.ID == id {
					rep.Leader = m.Name
				}
			}
		}
		say("ok", "leader %s", rep.Leader)
	}
	if rep.MinVersion != "" {
		if versionLess(rep.MinVersion, etcdMinVersion) {
			say("warn", "etcd %s is older than %s (out of support; fencegate is tested on 3.7)", rep.MinVersion, etcdMinVersion)
		} else {
			say("ok", "etcd %s (lowest of the members that answered)", rep.MinVersion)
		}
	}
	if quorumErr != nil {
		return result()
	}
	if on, err := etcdAuthEnabled(ctx, cli, cfg, rep.MinVersion); err != nil {
		say("warn", "auth status: %v", err)
	} else if rep.Auth = on; on {
		who := "client certificate"
		if o.Username != "" {
			who = "user " + o.Username
		}
		say("ok", "authentication on (%s)", who)
	} else {
		say("warn", "authentication off: any client that reaches the endpoints can rewrite or delete fences and locks (etcd's auth, docs/operations.md)")
	}
	if al, err := cli.AlarmList(ctx); err != nil {
		say("warn", "alarms: %v", err)
	} else {
		for _, a := range al.Alarms {
			rep.Alarms = append(rep.Alarms, a.Alarm.String())
			say("FAIL", "alarm %s on member %x: etcd refuses writes until it is cleared (NOSPACE: compact, defragment, `etcdctl alarm disarm`; docs/operations.md)", a.Alarm, a.MemberID)
		}
	}
	if dbSize > 0 {
		say("ok", "database %s, %s in use (defragmentation gives back the difference)", mib(dbSize), mib(dbInUse))
	}
	return result()
}

// checkEtcdTransport reports, per endpoint, TLS (version, the server
// certificate's expiry) or plain HTTP, which carries the password and the
// fences in clear off loopback.
func checkEtcdTransport(ctx context.Context, cfg clientv3.Config, say func(word, format string, args ...any)) {
	for _, ep := range cfg.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			say("FAIL", "endpoint %q is not a URL", config.RedactURL(ep))
			continue
		}
		if u.Scheme != "https" {
			if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback()) {
				say("ok", "%s: plain HTTP on loopback", u.Host)
			} else {
				say("warn", "%s: plain HTTP: the password and every fence travel in clear (https:// endpoints and tls, docs/operations.md)", u.Host)
			}
			continue
		}
		tc := cfg.TLS
		if tc == nil {
			tc = &tls.Config{}
		}
		st, err := etcd.ProbeTLS(ctx, ep, tc)
		if err != nil {
			say("FAIL", "%v", err)
			continue
		}
		leaf := st.PeerCertificates[0]
		left := time.Until(leaf.NotAfter)
		word := "ok"
		if left < etcdCertMargin {
			word = "warn"
		}
		cert := "no client certificate"
		if cfg.TLS != nil && cfg.TLS.GetClientCertificate != nil {
			cert = "client certificate sent"
		}
		say(word, "%s: %s, server certificate valid until %s (%d days), %s", u.Host, tls.VersionName(st.Version),
			leaf.NotAfter.UTC().Format(time.DateOnly), int(left.Hours()/24), cert)
	}
}

// etcdAuthEnabled asks the cluster whether authentication is on. etcd
// before 3.5 has no AuthStatus: there a read without credentials tells.
func etcdAuthEnabled(ctx context.Context, cli *clientv3.Client, cfg clientv3.Config, version string) (bool, error) {
	if !versionLess(version, "3.5.0") {
		as, err := cli.AuthStatus(ctx)
		return err == nil && as.Enabled, err
	}
	cfg.Username, cfg.Password = "", ""
	anon, err := clientv3.New(cfg)
	if err != nil {
		return false, err
	}
	defer anon.Close()
	_, err = anon.Get(ctx, "/fencegate-doctor-probe", clientv3.WithCountOnly())
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrUserNotFound):
		return true, nil
	}
	return false, err
}

// etcdMemberStatus asks one member for its status at its first client URL
// that answers; nil if none does.
func etcdMemberStatus(ctx context.Context, cli *clientv3.Client, urls []string) *clientv3.StatusResponse {
	for _, u := range urls {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, u)
		cancel()
		if err == nil {
			return st
		}
	}
	return nil
}

// versionLess compares dotted versions numerically ("3.4.23" < "3.5.0").
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
