package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

// BenchmarkTokenSource measures a fenced write through the gateway binary
// with tokens from each source: fencegate's coordinator (verified against
// its records in the embedded store), etcd (a three-member cluster) and
// ZooKeeper. Repeated: every write carries the same, already verified
// token (no verification). New: every write carries a token never seen
// before, on its own resource, so each one is verified with its source
// (and the fence advanced; fence_on_issue is off so that the coordinator's
// tokens too are verified and advanced by the write, not at issuance).
// Tokens are issued before the timer starts. Run
// with a fixed count, e.g.
//
//	go test -run '^$' -bench TokenSource -benchtime 400x ./e2e/
func BenchmarkTokenSource(b *testing.B) {
	cluster := testenv.Etcd(b, 3)
	zks := testenv.ZooKeeper(b)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	b.Cleanup(srv.Close)
	p := startFencegate(b, fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: etcd
      match: {path_prefix: /etcd/}
      upstream: {url: %[1]q}
      resource: "{path}"
      token_source: {etcd: {endpoints: [%[2]s], prefix: /locks}}
    - name: zk
      match: {path_prefix: /zk/}
      upstream: {url: %[1]q}
      resource: "{path}"
      token_source: {zookeeper: {servers: [%[3]q], path: /locks}}
    - name: coordinator
      match: {path_prefix: /coord/}
      upstream: {url: %[1]q}
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
coordinator: {enabled: true, listen: $COORDINATOR}
fence: {fence_on_issue: false}
`, srv.URL, quoteList(cluster.Endpoints), zks.Addr))
	gw := p.URL("gateway")
	ecli := etcdClient(b, cluster.Endpoints...)
	zc, _, err := zk.Connect([]string{zks.Addr}, 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(zc.Close)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	grant, err := ecli.Grant(context.Background(), 600)
	if err != nil {
		b.Fatal(err)
	}
	lease := grant.ID

	// issue returns a token of source for resource res, as the holder of its
	// lock has it.
	var issued int
	issue := func(source, res string) int64 {
		switch source {
		case "etcd":
			// A fresh key with a lease, as each acquisition creates one:
			// the only key of its lock, so its owner.
			issued++
			r, err := ecli.Put(context.Background(), fmt.Sprintf("%s/%x", resource.LockName("/locks", res), issued), "", clientv3.WithLease(lease))
			if err != nil {
				b.Fatal(err)
			}
			return r.Header.Revision
		case "zk":
			path := resource.LockName("/locks", res)
			for i := 1; i <= len(path); i++ {
				if i == len(path) || path[i] == '/' {
					if _, err := zc.Create(path[:i], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
						b.Fatal(err)
					}
				}
			}
			node, err := zc.Create(path+"/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			if err != nil {
				b.Fatal(err)
			}
			_, st, err := zc.Exists(node)
			if err != nil {
				b.Fatal(err)
			}
			return st.Czxid
		default:
			body := fmt.Sprintf(`{"resource":%q,"owner":"bench","ttl":"10m"}`, res)
			resp, err := http.Post(p.URL("coordinator")+"/v1/leases/acquire", "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			var l struct{ Token int64 }
			if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || l.Token == 0 {
				b.Fatalf("acquire %s: %s %v", res, resp.Status, err)
			}
			return l.Token
		}
	}
	put := func(url string, token int64) {
		req, _ := http.NewRequest("PUT", url, strings.NewReader("v"))
		req.Header.Set("Fencing-Token", fmt.Sprint(token))
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("PUT %s with %d: %s", url, token, resp.Status)
		}
	}
	for _, source := range []string{"coord", "etcd", "zk"} {
		b.Run(source+"/repeated", func(b *testing.B) {
			issued++
			res := fmt.Sprintf("/%s/repeated-%d", source, issued)
			token := issue(source, res)
			put(gw+res, token)
			b.ResetTimer()
			for b.Loop() {
				put(gw+res, token)
			}
		})
		b.Run(source+"/new", func(b *testing.B) {
			b.StopTimer()
			type w struct {
				res   string
				token int64
			}
			ws := make([]w, b.N)
			for i := range ws {
				issued++
				ws[i].res = fmt.Sprintf("/%s/new/%d", source, issued)
				ws[i].token = issue(source, ws[i].res)
			}
			b.StartTimer()
			for i := range b.N {
				put(gw+ws[i].res, ws[i].token)
			}
		})
	}
}
