package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Seed test 1: A acquires, pauses past its lease; B acquires a newer token
// and writes; A resumes and writes. A is refused and the upstream holds only
// B's effect.
func TestSeed1PausedOwnerRefused(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	gw := p.URL("gateway")

	// A wrote once while it held the lease.
	if st, body := write(t, "PUT", gw+"/orders/7", "41", "A1"); st != 200 {
		t.Fatalf("A's first write: %d %s", st, body)
	}
	// ... pauses; its lease passes to B, who writes.
	if st, body := write(t, "PUT", gw+"/orders/7", "42", "B1"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	// A resumes.
	st, body := write(t, "PUT", gw+"/orders/7", "41", "A2")
	if st != 409 || !strings.Contains(body, `"error":"stale_fencing_token"`) {
		t.Fatalf("A's late write: %d %s; want 409 stale_fencing_token", st, body)
	}
	if got, want := applied(rec, "/orders/7"), "PUT A1@41, PUT B1@42"; got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
	// The refusal is logged right after it is answered.
	waitFor(t, func() bool { return strings.Contains(p.Log(), `"msg":"stale_fencing_token"`) })
}

// Seed test 2: A's write is delayed in the network until B's newer write has
// reached the upstream; when it arrives it is refused.
func TestSeed2DelayedWriteRefused(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	gw := p.URL("gateway")
	slow := newHoldProxy(t, strings.TrimPrefix(gw, "http://"))

	aDone := make(chan int)
	go func() {
		st, _ := write(t, "PUT", "http://"+slow.Addr()+"/orders/8", "41", "A")
		aDone <- st
	}()
	slow.WaitHeld(t) // A's request is in the network, not yet at the gateway
	if st, body := write(t, "PUT", gw+"/orders/8", "42", "B"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	if got := applied(rec, "/orders/8"); got != "PUT B@42" {
		t.Fatalf("before A's write arrives the upstream has %q", got)
	}
	slow.Release()
	if st := <-aDone; st != 409 {
		t.Fatalf("A's delayed write: %d; want 409", st)
	}
	if got := applied(rec, "/orders/8"); got != "PUT B@42" {
		t.Fatalf("upstream applied %q; want only B's write", got)
	}
}

// Seed test 2, in-flight variant: A's write has reached the gateway and is
// slow at the upstream when B's arrives. B waits for A (drain, I2): the
// upstream applies A then B, never B then A.
func TestSeed2InFlightDrain(t *testing.T) {
	rec := &recorder.Recorder{}
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	rec.Delay = func(r *http.Request) {
		if r.Header.Get("Fencing-Token") == "41" {
			started <- struct{}{}
			<-release
		}
	}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	p := startFencegate(t, gatewayYAML(srv.URL))
	gw := p.URL("gateway")

	aDone := make(chan int)
	go func() { st, _ := write(t, "PUT", gw+"/orders/9", "41", "A"); aDone <- st }()
	<-started // A's body is at the upstream, not yet applied
	bDone := make(chan int)
	go func() { st, _ := write(t, "PUT", gw+"/orders/9", "42", "B"); bDone <- st }()

	// While A is in flight, the fence already stands at 42 and B waits.
	waitFor(t, func() bool {
		var st struct {
			Highest int64
			Ready   bool
		}
		getJSON(t, p.URL("admin")+"/v1/fences?resource=/orders/9", &st)
		return st.Highest == 42 && !st.Ready
	})
	select {
	case st := <-bDone:
		t.Fatalf("B answered %d while A was still in flight", st)
	case <-time.After(200 * time.Millisecond):
	}
	if got := applied(rec, "/orders/9"); got != "" {
		t.Fatalf("upstream applied %q while A was held", got)
	}
	close(release)
	if st := <-aDone; st != 200 {
		t.Fatalf("A: %d; want 200 (it was admitted before B existed)", st)
	}
	if st := <-bDone; st != 200 {
		t.Fatalf("B: %d; want 200", st)
	}
	if got, want := applied(rec, "/orders/9"), "PUT A@41, PUT B@42"; got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
}

// Seed test 2, abort variant: A's request body is still being sent when B's
// newer token arrives. A is aborted (an incomplete request is never applied)
// and B does not wait for A's slow client.
func TestSeed2AbortIncompleteBody(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	gw := p.URL("gateway")

	pr, pw := io.Pipe()
	aDone := make(chan int)
	go func() {
		req, _ := http.NewRequest("PUT", gw+"/orders/10", pr)
		req.ContentLength = 1 << 20
		req.Header.Set("Fencing-Token", "41")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			aDone <- 0
			return
		}
		resp.Body.Close()
		aDone <- resp.StatusCode
	}()
	pw.Write(bytes.Repeat([]byte("a"), 1000)) // part of A's body
	waitFor(t, func() bool {
		var st struct{ Highest int64 }
		getJSON(t, p.URL("admin")+"/v1/fences?resource=/orders/10", &st)
		return st.Highest == 41
	})
	if st, body := write(t, "PUT", gw+"/orders/10", "42", "B"); st != 200 {
		t.Fatalf("B: %d %s", st, body)
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	if st := <-aDone; st == 200 {
		t.Fatal("A's incomplete write answered 200")
	}
	if got := applied(rec, "/orders/10"); got != "PUT B@42" {
		t.Fatalf("upstream applied %q; want only B's write", got)
	}
}

// Restart durability (I1, I3): kill -9 the gateway right after it accepted
// 42; started again on the same store file, it still refuses 41.
func TestKill9RestartKeepsFence(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	gw := p.URL("gateway")
	if st, _ := write(t, "PUT", gw+"/orders/11", "42", "B"); st != 200 {
		t.Fatalf("B: %d", st)
	}
	p.Kill9()
	p.Restart()
	if st, body := write(t, "PUT", gw+"/orders/11", "41", "A"); st != 409 {
		t.Fatalf("after kill -9 and restart, token 41: %d %s; want 409", st, body)
	}
	if st, _ := write(t, "PUT", gw+"/orders/11", "42", "B2"); st != 200 {
		t.Fatalf("after restart, token 42 again: %d; want 200", st)
	}
	if got, want := applied(rec, "/orders/11"), "PUT B@42, PUT B2@42"; got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
}

// The store file is opened exclusively: a second gateway on it refuses to
// start with a clear message instead of fencing from a stale copy.
func TestStoreLockedRefusesStart(t *testing.T) {
	_, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	cfg := strings.ReplaceAll(gatewayYAML(up), "$DIR", p.Dir)
	cfg = strings.ReplaceAll(cfg, "$GATEWAY", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	cfg = strings.ReplaceAll(cfg, "$ADMIN", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	path := p.Dir + "/second.yaml"
	os.WriteFile(path, []byte(cfg), 0o600)
	out, err := exec.Command(p.bin, "serve", "-c", path).CombinedOutput()
	if err == nil {
		t.Fatalf("second gateway on the same store started:\n%s", out)
	}
	if !strings.Contains(string(out), "locked by another process") {
		t.Fatalf("second gateway's error does not say the store is locked:\n%s", out)
	}
}

func TestUnreadableStoreRefusesStart(t *testing.T) {
	_, up := newUpstream(t)
	dir := t.TempDir()
	os.WriteFile(dir+"/fencegate.db", []byte("this is not a bbolt file, it is garbage"), 0o600)
	cfg := strings.ReplaceAll(gatewayYAML(up), "$DIR", dir)
	cfg = strings.ReplaceAll(cfg, "$GATEWAY", "127.0.0.1:0")
	cfg = strings.ReplaceAll(cfg, "$ADMIN", "127.0.0.1:0")
	os.WriteFile(dir+"/c.yaml", []byte(cfg), 0o600)
	out, err := exec.Command(testenv.BuildBinary(t, "./cmd/fencegate"), "serve", "-c", dir+"/c.yaml").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "open store") {
		t.Fatalf("gateway on a garbage store file: err %v\n%s", err, out)
	}
}

// SIGHUP reloads routes; an invalid file keeps the old configuration.
func TestReload(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	gw := p.URL("gateway")
	if st, _ := write(t, "PUT", gw+"/invoices/1", "1", "x"); st != 404 {
		t.Fatalf("before reload /invoices/: %d; want 404", st)
	}
	orig, _ := os.ReadFile(p.CfgPath)

	os.WriteFile(p.CfgPath, []byte("gateway: {routes: [{name: broken}]}\nbogus: 1\n"), 0o600)
	p.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(p.Log(), "reload failed") })
	if st, _ := write(t, "PUT", gw+"/orders/1", "1", "x"); st != 200 {
		t.Fatalf("after invalid reload, old route: %d; want 200", st)
	}

	added := strings.Replace(string(orig), "    - name: orders", fmt.Sprintf(`    - name: invoices
      match: {path_prefix: /invoices/}
      upstream: {url: %q}
      resource: "{path}"
    - name: orders`, up), 1)
	os.WriteFile(p.CfgPath, []byte(added), 0o600)
	p.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(p.Log(), "configuration reloaded") })
	if st, body := write(t, "PUT", gw+"/invoices/1", "1", "x"); st != 200 {
		t.Fatalf("after reload /invoices/: %d %s; want 200", st, body)
	}
	if got := applied(rec, "/invoices/1"); got != "PUT x@1" {
		t.Fatalf("upstream applied %q", got)
	}
}

// SIGTERM lets in-flight writes finish before the process exits.
func TestSigtermDrainsInFlight(t *testing.T) {
	rec := &recorder.Recorder{}
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	rec.Delay = func(r *http.Request) { started <- struct{}{}; <-release }
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	p := startFencegate(t, gatewayYAML(srv.URL))
	done := make(chan int)
	go func() { st, _ := write(t, "PUT", p.URL("gateway")+"/orders/12", "5", "x"); done <- st }()
	<-started
	p.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	if p.Exited() {
		t.Fatal("exited with a write in flight")
	}
	close(release)
	if st := <-done; st != 200 {
		t.Fatalf("in-flight write during shutdown: %d; want 200", st)
	}
	p.Stop() // waits for a clean exit
	if got := applied(rec, "/orders/12"); got != "PUT x@5" {
		t.Fatalf("upstream applied %q", got)
	}
}

// The admin API: show a fence, and raise it by hand to fence out a known
// zombie; it never lowers a fence.
func TestAdminFenceAPI(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	gw, admin := p.URL("gateway"), p.URL("admin")
	write(t, "PUT", gw+"/orders/13", "41", "A")

	out, err := exec.Command(p.bin, "fence", "advance", "-admin", admin, "/orders/13", "50").CombinedOutput()
	if err != nil {
		t.Fatalf("fence advance: %v\n%s", err, out)
	}
	if st, _ := write(t, "PUT", gw+"/orders/13", "41", "zombie"); st != 409 {
		t.Fatalf("zombie after manual advance: %d; want 409", st)
	}
	// Lowering by hand is a no-op.
	resp, err := http.Post(admin+"/v1/fences/advance", "application/json", strings.NewReader(`{"resource":"/orders/13","token":7}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var st struct {
		Resource  string
		Highest   int64
		Ready     bool
		UpdatedAt time.Time `json:"updated_at"`
	}
	getJSON(t, admin+"/v1/fences?resource=/orders/13", &st)
	if st.Highest != 50 || !st.Ready || st.UpdatedAt.IsZero() {
		t.Fatalf("fence %+v; want highest 50, ready, updated_at set", st)
	}
	out, err = exec.Command(p.bin, "fence", "show", "-admin", admin, "/orders/13").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"highest":50`) {
		t.Fatalf("fence show: %v %s", err, out)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(admin + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, err, resp)
		}
		resp.Body.Close()
	}
	if got := applied(rec, "/orders/13"); got != "PUT A@41" {
		t.Fatalf("upstream applied %q", got)
	}
}

func TestValidateCommand(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
	dir := t.TempDir()
	good := strings.NewReplacer("$GATEWAY", "127.0.0.1:8080", "$ADMIN", "127.0.0.1:9090", "$DIR", dir).Replace(gatewayYAML("http://127.0.0.1:9000"))
	os.WriteFile(dir+"/good.yaml", []byte(good), 0o600)
	out, err := exec.Command(bin, "validate", "-c", dir+"/good.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok (1 routes)") {
		t.Fatalf("validate good: %v\n%s", err, out)
	}
	bad := strings.Replace(good, "resource: \"{path}\"", "resource: \"{pth}\"\n      retries: 3", 1)
	os.WriteFile(dir+"/bad.yaml", []byte(bad), 0o600)
	out, err = exec.Command(bin, "validate", "-c", dir+"/bad.yaml").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bad.yaml:9:") || !strings.Contains(string(out), "retries") {
		t.Fatalf("validate bad: %v\n%s", err, out)
	}
	if code := exitCode(exec.Command(bin, "validate", "-x")); code != 2 {
		t.Fatalf("usage error exit code %d; want 2", code)
	}
}

func TestDemoCommand(t *testing.T) {
	out, err := exec.Command(testenv.BuildBinary(t, "./cmd/fencegate"), "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"stale_fencing_token", `upstream state of /orders/7: "shipped by B"`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// holdProxy is a TCP proxy that holds everything clients send until
// Release: a network that delays one worker's write.
type holdProxy struct {
	ln      net.Listener
	target  string
	release chan struct{}
	held    chan struct{}
	once    sync.Once
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &holdProxy{ln: ln, target: target, release: make(chan struct{}), held: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); h.Release() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go h.serve(c)
		}
	}()
	return h
}

func (h *holdProxy) serve(c net.Conn) {
	defer c.Close()
	var buf bytes.Buffer
	chunk := make([]byte, 4096)
	n, err := c.Read(chunk) // the request, held
	if err != nil {
		return
	}
	buf.Write(chunk[:n])
	close(h.held)
	<-h.release
	up, err := net.Dial("tcp", h.target)
	if err != nil {
		return
	}
	defer up.Close()
	up.Write(buf.Bytes())
	go io.Copy(up, c)
	io.Copy(c, up)
}

func (h *holdProxy) Addr() string { return h.ln.Addr().String() }

func (h *holdProxy) WaitHeld(t *testing.T) {
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("request never reached the hold proxy")
	}
}

func (h *holdProxy) Release() { h.once.Do(func() { close(h.release) }) }
