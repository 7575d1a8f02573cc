package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/console"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/server"
)

const clusterYAML = `
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: $UPSTREAM}
      resource: "{path}"
store:
  postgres: {url: "%s"}
# Any token goes: the view is under test, not token issuance.
fence: {mode: shared, verify_tokens: false}
admin:
  listen: 127.0.0.1:0
  auth:
    api_keys:
      - {owner: ops, sha256: "%s"}
`

// TestConsoleCluster: in fence mode shared, the console of either replica
// shows every replica (up, or down when it stopped reporting), each one's
// writes in flight and refusals, and the refusals of all of them; a
// replica that stops cleanly leaves the view. Two replicas share one
// PostgreSQL database, as in production.
func TestConsoleCluster(t *testing.T) {
	pg := testenv.Postgres(t)
	cp := startClusterPair(t, fmt.Sprintf(clusterYAML, pg.URL, auth.HashKey(consoleKey)))
	p := cp.wait(t, 2)
	admin2 := "http://" + cp.s2.Addr("admin")
	var other console.Replica
	for _, r := range p.Replicas {
		if !r.Up {
			t.Errorf("replica %s is shown down while it reports", r.ID)
		}
		if !r.Self {
			other = r
		}
	}
	wantOtherReplica(t, p, other)

	// A replica that stopped reporting without a goodbye (crashed) is
	// shown down.
	conn, err := pgx.Connect(context.Background(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO fencegate_replicas (id, name, started_at, seen_at, report)
		VALUES ('crashed0', 'gone-host', now() - interval '1 hour', now() - interval '1 minute', '{"inflight_writes":2,"refusals":7,"recent_refusals":[]}')`); err != nil {
		t.Fatal(err)
	}

	ctx := browser(t, map[string]any{"Authorization": "Bearer " + consoleKey})
	if err := chromedp.Do(ctx, chromedp.Navigate(admin2+"/cluster"), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
		t.Fatal(err)
	}
	states := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("#replicas tbody tr")).map(tr => tr.querySelector("td.name").textContent.trim().split(" ")[1] + "=" + tr.querySelector("td.state").textContent.trim())`)
	slices.Sort(states)
	want := []string{"crashed0=down", other.ID + "=up"}
	for _, r := range p.Replicas {
		if r.Self {
			want = append(want, r.ID+"=up")
		}
	}
	slices.Sort(want)
	if !slices.Equal(states, want) {
		t.Errorf("cluster page replicas %q; want %q", states, want)
	}
	if got := texts(t, ctx, "#cluster-refusals td.code"); len(got) != 3 {
		t.Errorf("cluster page refusals %q; want replica 1's 3", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("header nav a[href='/cluster']").length`); n != 1 {
		t.Error("no Cluster link in the navigation")
	}
	shoot(t, ctx, "cluster.png")

	// Replica 1 stops cleanly: it leaves the view.
	cp.stopFirst(t, other.ID)
}

// clusterPair is two replicas of one shared store with the console on:
// replica 1 refused three writes without a token, replica 2 holds one
// write in flight at the upstream until stopFirst.
type clusterPair struct {
	s1, s2  *server.Server
	held    chan answer
	release func()
}

// startClusterPair starts the replicas of yaml (clusterYAML's shape, with
// $UPSTREAM) and makes their refusals and the held write.
func startClusterPair(t *testing.T, yaml string) *clusterPair {
	t.Helper()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/orders/held" {
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(up.Close)
	var once sync.Once
	cp := &clusterPair{held: make(chan answer, 1), release: func() { once.Do(func() { close(release) }) }}
	t.Cleanup(cp.release)
	start := func() *server.Server {
		s, err := server.New(context.Background(), parse(t, yaml, up.URL, t.TempDir()), server.Options{
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ReplicaReportInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			s.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.Shutdown(ctx)
		})
		return s
	}
	cp.s1, cp.s2 = start(), start()
	c := &http.Client{}
	for i := range 3 {
		if r := do(t, c, "PUT", "http://"+cp.s1.Addr("gateway")+fmt.Sprintf("/orders/%d", i), strings.NewReader("x"), nil); r.Status != 428 {
			t.Fatalf("write without token through replica 1: %d %s", r.Status, r.Body)
		}
	}
	go func() {
		cp.held <- do(t, c, "PUT", "http://"+cp.s2.Addr("gateway")+"/orders/held", strings.NewReader("x"), map[string]string{"Fencing-Token": "3"})
	}()
	select {
	case <-entered:
	case r := <-cp.held:
		t.Fatalf("the write through replica 2 was answered before the upstream saw it: %d %s", r.Status, r.Body)
	case <-time.After(30 * time.Second):
		t.Fatal("the write through replica 2 never reached the upstream")
	}
	return cp
}

// wait returns the cluster view asked of replica 2 once it lists n
// replicas, replica 1's three refusals and replica 2's write in flight.
func (cp *clusterPair) wait(t *testing.T, n int) console.ClusterPage {
	t.Helper()
	var p console.ClusterPage
	deadline := time.Now().Add(20 * time.Second)
	for {
		getJSON(t, "http://"+cp.s2.Addr("admin")+"/v1/cluster", &p)
		if len(p.Replicas) == n && len(p.Refusals) == 3 && slices.ContainsFunc(p.Replicas, func(r console.Replica) bool { return r.Self && r.InFlight == 1 }) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster view never showed %d replicas with 3 refusals and 1 write in flight: %+v", n, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopFirst ends the held write and stops replica 1 (whose id is id)
// cleanly: it must leave replica 2's view.
func (cp *clusterPair) stopFirst(t *testing.T, id string) {
	t.Helper()
	cp.release()
	if r := <-cp.held; r.Status != 204 {
		t.Errorf("held write: %d %s", r.Status, r.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp.s1.Shutdown(ctx)
	var p console.ClusterPage
	getJSON(t, "http://"+cp.s2.Addr("admin")+"/v1/cluster", &p)
	for _, r := range p.Replicas {
		if r.ID == id {
			t.Errorf("replica 1 stopped cleanly but is still listed: %+v", r)
		}
	}
}

// wantOtherReplica checks replica 1 as replica 2 shows it in p: the three
// refusals it was sent, nothing in flight, and every refusal of the
// cluster its own.
func wantOtherReplica(t *testing.T, p console.ClusterPage, other console.Replica) {
	t.Helper()
	if other.Refusals != 3 || other.InFlight != 0 {
		t.Errorf("replica 1 as replica 2 sees it: %d refusals, %d in flight; want 3, 0", other.Refusals, other.InFlight)
	}
	for _, rf := range p.Refusals {
		if rf.ReplicaID != other.ID || rf.Code != "missing_fencing_token" {
			t.Errorf("cluster refusal %+v; want replica 1's missing_fencing_token", rf)
		}
	}
}
