package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/upstreamconn"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// h2cWrites makes 20 writes of /orders/k through gw (tokens 1..20, bodies
// v1..v20), then a stale one (token 3), and fails t unless each was
// answered as it should (2xx, then 409).
func h2cWrites(t *testing.T, gw *Proc) {
	t.Helper()
	for i := 1; i <= 20; i++ {
		if st, body := write(t, "PUT", gw.URL("gateway")+"/orders/k", fmt.Sprint(i), fmt.Sprintf("v%d", i)); st/100 != 2 {
			t.Fatalf("write %d: %d %s", i, st, body)
		}
	}
	if st, body := write(t, "PUT", gw.URL("gateway")+"/orders/k", "3", "stale"); st != 409 {
		t.Fatalf("stale write: %d %s", st, body)
	}
}

// upstream.h2c against a Go server speaking only HTTP/2 over cleartext:
// every write lands once, in order, with its token (the upstream's
// history); a stale one is refused; the writes share one connection; and
// a write the upstream answers without reading its body (401, here with a
// request for another resource in the body) leaves nothing behind, since
// HTTP/2 frames the body: the hidden request is never applied and the
// connection carries the next writes.
func TestH2CUpstreamGo(t *testing.T) {
	rec := &recorder.Recorder{}
	var conns, h1 atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			h1.Add(1)
		}
		if r.URL.Path == "/orders/unread" {
			http.Error(w, "unauthorized", http.StatusUnauthorized) // body unread
			return
		}
		rec.ServeHTTP(w, r)
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	gw := startFencegate(t, keepRoute(srv.URL, "h2c: true"))
	hidden := "PUT /orders/hidden HTTP/1.1\r\nHost: upstream\r\nContent-Length: 0\r\n\r\n"
	if st, body := write(t, "PUT", gw.URL("gateway")+"/orders/unread", "1", hidden); st != 401 {
		t.Fatalf("unread write: %d %s", st, body)
	}
	h2cWrites(t, gw)
	want := make([]string, 20)
	for i := range want {
		want[i] = fmt.Sprintf("PUT v%d@%d", i+1, i+1)
	}
	if got := applied(rec, "/orders/k"); got != strings.Join(want, ", ") {
		t.Fatalf("upstream history %q, want %q", got, strings.Join(want, ", "))
	}
	if got := applied(rec, "/orders/hidden"); got != "" {
		t.Fatalf("the body of a write answered unread was applied: %q", got)
	}
	if n := h1.Load(); n != 0 {
		t.Fatalf("%d requests reached the upstream over HTTP/1", n)
	}
	if n := conns.Load(); n > 2 {
		t.Fatalf("22 writes opened %d upstream connections; want them kept (at most 2)", n)
	}
}

// upstream.h2c against nginx's WebDAV module on a cleartext HTTP/2
// listener (prior knowledge): the file nginx stores holds the last
// admitted write, not the stale one, and nginx's own count of accepted
// connections (stub_status) shows the writes shared them.
func TestH2CUpstreamNginx(t *testing.T) {
	ng := startH2CNginx(t)
	gw := startFencegate(t, keepRoute(ng.url, "h2c: true"))
	before := ng.accepts(t)
	h2cWrites(t, gw)
	b, err := os.ReadFile(filepath.Join(ng.root, "orders", "k"))
	if err != nil || string(b) != "v20" {
		t.Fatalf("nginx stored %q (%v); want v20", b, err)
	}
	// The status request itself is one connection.
	if n := ng.accepts(t) - before; n > 3 {
		t.Fatalf("21 writes made nginx accept %d connections; want them kept (at most 3 with the status request)", n)
	}
}

// h2cNginx is nginx serving WebDAV PUTs over HTTP/2 on a cleartext
// listener.
type h2cNginx struct {
	url, root string
}

func startH2CNginx(t *testing.T) *h2cNginx {
	t.Helper()
	bin := "/usr/sbin/nginx"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("nginx is missing: run scripts/deps.sh")
		}
		t.Skip("nginx is missing: run scripts/deps.sh")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "www")
	for _, d := range []string{root, filepath.Join(dir, "tmp")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := testenv.FreePort(t)
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  fastcgi_temp_path %[1]s/tmp;
  uwsgi_temp_path %[1]s/tmp;
  scgi_temp_path %[1]s/tmp;
  server {
    listen 127.0.0.1:%[2]d http2;
    root %[3]s;
    location = /_status { stub_status; }
    location / {
      dav_methods PUT DELETE;
      create_full_put_path on;
      dav_access user:rw all:r;
    }
  }
}
`, dir, port, root)
	cf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", cf, "-p", dir, "-e", filepath.Join(dir, "error.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 10*time.Second {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx did not start: %s", log)
		}
	}
	return &h2cNginx{url: "http://" + addr, root: root}
}

// accepts is nginx's count of accepted connections (stub_status), read
// over HTTP/2 on a connection of its own.
func (n *h2cNginx) accepts(t *testing.T) int {
	t.Helper()
	tr := upstreamconn.NewH2C(&http.Transport{})
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(n.url + "/_status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var active, accepts int
	if _, err := fmt.Sscanf(string(b), "Active connections: %d \nserver accepts handled requests\n %d", &active, &accepts); err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("stub_status over HTTP/%d: %q (%v)", resp.ProtoMajor, b, err)
	}
	return accepts
}
