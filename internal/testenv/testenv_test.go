package testenv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

func query(t *testing.T, url, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestPostgres(t *testing.T) {
	a := testenv.Postgres(t)
	b := testenv.Postgres(t)
	if a.Database == b.Database {
		t.Fatalf("two calls gave one database %s", a.Database)
	}
	if got := query(t, a.URL, "SELECT current_database()"); got != a.Database {
		t.Errorf("current_database() = %q; want %q", got, a.Database)
	}
	if got := query(t, b.URL, "SHOW fsync"); got != "on" {
		t.Errorf("fsync = %q; want on", got)
	}
	if os.Getenv("DATABASE_URL") == "" {
		if got := query(t, b.URL, "SHOW max_connections"); got != "200" {
			t.Errorf("max_connections = %s; want 200", got)
		}
	}
}

func TestPostgresIsolatedRestart(t *testing.T) {
	pg := testenv.PostgresIsolated(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	// A crash must keep the committed row (fsync on, WAL replay).
	pg.Restart(t, true)
	if got := query(t, pg.URL, "SELECT v::text FROM t"); got != "42" {
		t.Errorf("after crash restart v = %s; want 42", got)
	}

	pg.Stop(t)
	if _, err := pgx.Connect(ctx, pg.URL); err == nil {
		t.Errorf("connect to a stopped cluster succeeded")
	}
	pg.Start(t)
	if got := query(t, pg.URL, "SELECT v::text FROM t"); got != "42" {
		t.Errorf("after stop/start v = %s; want 42", got)
	}
}

func TestVersity(t *testing.T) {
	s3 := testenv.Versity(t)
	s3.CreateBucket(t, "fencegate-test")
	resp, body := s3.Do(t, http.MethodPut, "/fencegate-test/hello.txt", []byte("hi"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PutObject: %s: %s", resp.Status, body)
	}
	resp, body = s3.Do(t, http.MethodGet, "/", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<Name>fencegate-test</Name>") {
		t.Fatalf("ListBuckets: %s: %s", resp.Status, body)
	}
	resp, body = s3.Do(t, http.MethodGet, "/fencegate-test/hello.txt", nil)
	if resp.StatusCode != http.StatusOK || string(body) != "hi" {
		t.Fatalf("GetObject: %s: %q", resp.Status, body)
	}
}

func TestPebble(t *testing.T) {
	acme := testenv.Pebble(t, testenv.PebbleConfig{})
	resp, err := acme.HTTPClient().Get(acme.DirectoryURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var dir map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&dir); err != nil {
		t.Fatal(err)
	}
	if dir["newOrder"] == nil {
		t.Errorf("directory has no newOrder: %v", dir)
	}
	if !strings.Contains(string(acme.RootPEM), "BEGIN CERTIFICATE") {
		t.Errorf("RootPEM = %q; want a PEM certificate", acme.RootPEM)
	}
}

func TestJaeger(t *testing.T) {
	j := testenv.Jaeger(t)
	resp, err := http.Get(j.QueryURL + "/api/services")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"data"`) {
		t.Fatalf("/api/services: %s: %s", resp.Status, b)
	}
	// OTLP HTTP accepts an empty export.
	resp, err = http.Post(j.OTLPHTTP+"/v1/traces", "application/json", strings.NewReader(`{"resourceSpans":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("OTLP export: %s", resp.Status)
	}
}

func TestToxiproxy(t *testing.T) {
	tp := testenv.Toxiproxy(t)
	resp, err := http.Get(tp.URL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// An echo upstream behind a proxy, then latency.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	p := tp.Proxy(t, "echo", l.Addr().String())
	roundTrip := func() time.Duration {
		t.Helper()
		start := time.Now()
		c, err := net.DialTimeout("tcp", p.Listen, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	roundTrip()
	// 2s of latency, and half of it as the bound once removed: a toxic
	// left in place costs its 2s, a loaded machine (CI runs packages in
	// parallel on 2 cores) far less than 1s, but it may cost more than the
	// 50ms between a latency of 300ms and a bound of 250ms.
	const latency = 2 * time.Second
	name := p.AddLatency(t, latency)
	if d := roundTrip(); d < latency {
		t.Errorf("round trip with latency toxic took %v; want >= %v", d, latency)
	}
	p.RemoveToxic(t, name)
	if d := roundTrip(); d > latency/2 {
		t.Errorf("round trip after removing the toxic took %v; want well under the toxic's %v", d, latency)
	}
}

func TestBuildBinary(t *testing.T) {
	// BuildBinary builds packages of this module: take its first main package.
	out, err := exec.Command("go", "list", "-f", "{{if eq .Name \"main\"}}{{.ImportPath}}{{end}}", "github.com/fencegate/fencegate/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) == 0 {
		t.Skip("no main package in the module yet")
	}
	p := testenv.BuildBinary(t, pkgs[0])
	if p2 := testenv.BuildBinary(t, pkgs[0]); p2 != p {
		t.Errorf("second build gave %s; want cached %s", p2, p)
	}
}

func TestFreePortWait(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go http.Serve(l, http.NotFoundHandler())
	testenv.WaitTCP(t, l.Addr().String(), time.Second)
	testenv.WaitHTTP(t, "http://"+l.Addr().String()+"/", time.Second)
	if p := testenv.FreePort(t); p <= 0 {
		t.Errorf("FreePort = %d", p)
	}
}

// FreePort's ports are distinct, bindable, and below the kernel's
// ephemeral range, where no connection's source port or :0 listener of
// another process can take them between FreePort and the caller's bind.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &low)
	}
	seen := map[int]bool{}
	for range 200 {
		p := testenv.FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
		if p >= low || p < 10000 {
			t.Fatalf("FreePort = %d; want a port in [10000, %d)", p, low)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("FreePort's %d cannot be bound: %v", p, err)
		}
		l.Close()
	}
}

// The Apache quirks `precondition: etag` on HTTP routes must handle: no
// ETag on a PUT's answer, a weak ETag right after the write, a strong one a
// moment later; If-Match with the strong one is honoured, a wrong one and
// If-None-Match: * on an existing resource are refused with 412.
func TestApache(t *testing.T) {
	a := testenv.Apache(t)
	do := func(method, etag, noneMatch, body string) *http.Response {
		req, _ := http.NewRequest(method, a.URL+"/doc.txt", strings.NewReader(body))
		if etag != "" {
			req.Header.Set("If-Match", etag)
		}
		if noneMatch != "" {
			req.Header.Set("If-None-Match", noneMatch)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	put := do("PUT", "", "*", "v1")
	if put.StatusCode != http.StatusCreated || put.Header.Get("ETag") != "" {
		t.Fatalf("first PUT: %d ETag %q; want 201 without ETag", put.StatusCode, put.Header.Get("ETag"))
	}
	var strong string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		strong = do("HEAD", "", "", "").Header.Get("ETag")
		if !strings.HasPrefix(strong, "W/") || time.Now().After(deadline) {
			break
		}
	}
	if strong == "" || strings.HasPrefix(strong, "W/") {
		t.Fatalf("ETag %q; want a strong ETag within 5s", strong)
	}
	if st := do("PUT", `"wrong"`, "", "v2").StatusCode; st != http.StatusPreconditionFailed {
		t.Fatalf("PUT If-Match wrong: %d; want 412", st)
	}
	if st := do("PUT", "", "*", "v2").StatusCode; st != http.StatusPreconditionFailed {
		t.Fatalf("PUT If-None-Match * on an existing resource: %d; want 412", st)
	}
	if st := do("PUT", strong, "", "v2").StatusCode; st != http.StatusNoContent {
		t.Fatalf("PUT If-Match current: %d; want 204", st)
	}
}
