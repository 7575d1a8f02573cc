package e2e

// A worker that hangs up does not end its write (I2): an admitted write
// counts as in flight until the upstream is done with it, whatever its
// client does. Worker A's write with token 1 takes the upstream 1.5s to
// apply; A hangs up (killed, or its own client timed out) while the
// upstream works; B's write with token 2 must not reach the upstream
// before A's has been applied, or A's older write lands last. Each case
// is checked on the upstream's history: the order in which it applied
// the writes.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// hangupApply is how long the upstream takes to apply a write of token 1;
// hangupAfter is when worker A hangs up, counted from the moment the
// upstream has its whole request.
const (
	hangupApply = 1500 * time.Millisecond
	hangupAfter = 300 * time.Millisecond
)

// slowUpstream is a recording upstream that takes hangupApply to apply a
// write of token 1 once it has read its body, and reports on arrived the
// key of each such write when it starts applying it. On keys containing
// "answer_streaming" it first answers the head and a part of the body and flushes
// them, then applies the write and ends the answer: an upstream whose
// answer streams while it works.
type slowUpstream struct {
	rec     *recorder.Recorder
	url     string
	arrived chan string
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{arrived: make(chan string, 16)}
	u.rec = &recorder.Recorder{Delay: func(r *http.Request) {
		if r.Header.Get("Fencing-Token") == "1" {
			u.arrived <- r.URL.Path
			time.Sleep(hangupApply)
		}
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "answer_streaming") && r.Header.Get("Fencing-Token") == "1" {
			// Read first: net/http would discard an unread body once
			// the head is written.
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "applying\n")
			http.NewResponseController(w).Flush()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		u.rec.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// waitArrived waits (bounded) until the upstream starts applying the
// write of token 1 to key.
func (u *slowUpstream) waitArrived(t *testing.T, key string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case k := <-u.arrived:
			if k == key {
				return
			}
			u.arrived <- k // another case's; put back
			time.Sleep(5 * time.Millisecond)
		case <-deadline:
			t.Fatalf("A's write to %s never reached the upstream", key)
		}
	}
}

// tokensApplied is the order in which the upstream applied writes to key,
// as their tokens ("1,2").
func tokensApplied(rec *recorder.Recorder, key string) string {
	var s []string
	for _, a := range rec.HistoryOf(key) {
		s = append(s, a.Token)
	}
	return strings.Join(s, ",")
}

// A hang-up case: what worker A sends on its own connection before it
// hangs up, and whether that is a whole request (which the upstream
// applies) or not (which it never applies).
type hangupCase struct {
	name  string
	whole bool
	// send writes A's request for path to c; it returns when A has sent
	// all it will send.
	send func(t *testing.T, c net.Conn, path string)
}

func rawHead(method, path, host string, hdr ...string) string {
	h := method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nFencing-Token: 1\r\n"
	for _, kv := range hdr {
		h += kv + "\r\n"
	}
	return h + "\r\n"
}

func mustWrite(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("A's request: %v", err)
	}
}

var hangupCases = []hangupCase{
	{name: "small_body", whole: true, send: func(t *testing.T, c net.Conn, path string) {
		mustWrite(t, c, rawHead("PUT", path, "gw", "Content-Length: 1")+"A")
	}},
	{name: "streamed_body", whole: true, send: func(t *testing.T, c net.Conn, path string) {
		// Larger than the gateway reads before the fence: streamed.
		body := strings.Repeat("A", 100<<10)
		mustWrite(t, c, rawHead("PUT", path, "gw", fmt.Sprintf("Content-Length: %d", len(body)))+body)
	}},
	{name: "chunked_body", whole: true, send: func(t *testing.T, c net.Conn, path string) {
		mustWrite(t, c, rawHead("PUT", path, "gw", "Transfer-Encoding: chunked")+"1\r\nA\r\n0\r\n\r\n")
	}},
	{name: "expect_continue", whole: true, send: func(t *testing.T, c net.Conn, path string) {
		mustWrite(t, c, rawHead("PUT", path, "gw", "Content-Length: 1", "Expect: 100-continue"))
		// The body follows the go-ahead (or a second without one, as
		// curl does).
		c.SetReadDeadline(time.Now().Add(time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.SetReadDeadline(time.Time{})
		if line != "" && !strings.HasPrefix(line, "HTTP/1.1 100") {
			t.Fatalf("A got %q before sending its body; want 100 Continue", line)
		}
		mustWrite(t, c, "A")
	}},
	{name: "answer_streaming", whole: true, send: func(t *testing.T, c net.Conn, path string) {
		mustWrite(t, c, rawHead("PUT", path, "gw", "Content-Length: 1")+"A")
	}},
	{name: "mid_body_content_length", send: func(t *testing.T, c net.Conn, path string) {
		mustWrite(t, c, rawHead("PUT", path, "gw", "Content-Length: 102400")+strings.Repeat("A", 50<<10))
	}},
	{name: "mid_chunked_body", send: func(t *testing.T, c net.Conn, path string) {
		mustWrite(t, c, rawHead("PUT", path, "gw", "Transfer-Encoding: chunked")+"1\r\nA\r\n")
	}},
	{name: "before_continue", send: func(t *testing.T, c net.Conn, path string) {
		mustWrite(t, c, rawHead("PUT", path, "gw", "Content-Length: 1", "Expect: 100-continue"))
	}},
}

// runHangup runs one case: A's write to path through gw (host:port) hangs
// up, then B writes token 2 through bURL (the same gateway or another
// replica). The upstream must have applied A's write before B's if it was
// whole, and never if not.
func runHangup(t *testing.T, up *slowUpstream, gw, bURL, path string, c hangupCase) {
	conn, err := net.Dial("tcp", gw)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c.send(t, conn, path)
	if c.whole {
		up.waitArrived(t, path)
	} else {
		time.Sleep(200 * time.Millisecond) // A's part is with the upstream
	}
	time.Sleep(hangupAfter)
	conn.Close() // A hangs up while the upstream works
	start := time.Now()
	st, body := write(t, "PUT", bURL+path, "2", "B")
	if st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	want := "2"
	if c.whole {
		want = "1,2"
	}
	// Whatever A's write was to become has happened by now.
	time.Sleep(hangupApply - time.Since(start))
	if got := tokensApplied(up.rec, path); got != want {
		t.Fatalf("the upstream applied tokens %q to %s; want %q (B's write took %v)", got, path, want, time.Since(start))
	}
}

// One gateway per server path; every case on its own key, side by side.
func TestHangupKeepsWriteInFlight(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast_path=%v", fast), func(t *testing.T) {
			up := newSlowUpstream(t)
			yaml := strings.Replace(gatewayYAML(up.url), "  listen: $GATEWAY\n",
				fmt.Sprintf("  listen: $GATEWAY\n  fast_path: %v\n", fast), 1)
			p := startFencegate(t, yaml)
			gw := strings.TrimPrefix(p.URL("gateway"), "http://")
			before := scrape(t, p.URL("admin"))
			t.Run("cases", func(t *testing.T) {
				for _, c := range hangupCases {
					t.Run(c.name, func(t *testing.T) {
						t.Parallel()
						runHangup(t, up, gw, p.URL("gateway"), "/orders/hangup-"+c.name, c)
					})
				}
			})
			if t.Failed() {
				return
			}
			// Each hang-up is visible: a log line and a counter.
			for _, c := range hangupCases {
				waitLog(t, p, `"msg":"client_closed"`, `"resource":"/orders/hangup-`+c.name+`"`)
			}
			after := scrape(t, p.URL("admin"))
			series := `fencegate_client_closed_writes_total{route="orders"}`
			if got := after[series] - before[series]; got != float64(len(hangupCases)) {
				t.Errorf("%s moved by %v; want %d", series, got, len(hangupCases))
			}
		})
	}
}

// Two shared replicas over one PostgreSQL: A's write through replica 1
// hangs up; B's, through replica 2, waits for A's marker, which replica 1
// holds until the upstream answered A.
func TestHangupSharedReplicas(t *testing.T) {
	pg := testenv.Postgres(t)
	up := newSlowUpstream(t)
	r := sharedReplicas(t, 2, sharedYAML("shared", pg.URL, up.url, false))
	gw := strings.TrimPrefix(r[0].URL("gateway"), "http://")
	for _, c := range hangupCases {
		if c.name != "small_body" && c.name != "answer_streaming" && c.name != "mid_body_content_length" {
			continue // the other shapes differ only before the fence
		}
		t.Run(c.name, func(t *testing.T) {
			runHangup(t, up, gw, r[1].URL("gateway"), "/orders/shared-hangup-"+c.name, c)
		})
	}
}

// delayRelay stands between the gateway and an S3 server as the part of
// the upstream that takes its time: it reads each request whole, waits
// hangupApply before applying a body that holds marker, and then applies
// it whether or not the gateway is still connected (a request the
// upstream has whole is applied). It records the order in which the S3
// server applied the bodies it relayed.
type delayRelay struct {
	target  *url.URL
	marker  []byte
	arrived chan struct{}

	mu      sync.Mutex
	applied []string
}

func (d *delayRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPut && bytes.Contains(body, d.marker) {
		d.arrived <- struct{}{}
		time.Sleep(hangupApply)
	}
	out, err := http.NewRequestWithContext(context.Background(), r.Method, d.target.String()+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host // signed
	out.ContentLength = int64(len(body))
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if r.Method == http.MethodPut && resp.StatusCode == http.StatusOK {
		d.mu.Lock()
		who := "B"
		if bytes.Contains(body, d.marker) {
			who = "A"
		}
		d.applied = append(d.applied, who)
		d.mu.Unlock()
	}
	for k, vv := range resp.Header {
		w.Header()[k] = vv
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// An S3 route (VersityGW): A's PutObject is cancelled by its own client
// while the upstream applies it; B's newer PutObject must not be applied
// before it, and S3 ends with B's object.
func TestHangupS3(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	relay := &delayRelay{target: target, marker: []byte("written-by-A"), arrived: make(chan struct{}, 1)}
	rs := httptest.NewServer(relay)
	t.Cleanup(rs.Close)
	p := startFencegate(t, s3GatewayYAML(s3RouteYAML("objects", "", rs.URL, srv, "", "10s")))
	e := &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}
	const key = "reports/hangup.csv"

	ctx, cancel := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() {
		_, err := e.worker(tokenOf(1)).PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s3Bucket), Key: aws.String(key), Body: strings.NewReader("written-by-A"),
		})
		errA <- err
	}()
	select {
	case <-relay.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("A's PutObject never reached the upstream")
	}
	arrived := time.Now()
	time.Sleep(hangupAfter)
	cancel() // A's client gives up: its connection is closed
	if err := <-errA; err == nil {
		t.Fatal("A's PutObject succeeded; want it cancelled by its client")
	}
	if err := putObject(t, e.worker(tokenOf(2)), key, "written-by-B"); err != nil {
		t.Fatalf("B's PutObject: %v", err)
	}
	// Whatever A's write was to become has happened by now.
	time.Sleep(hangupApply + 500*time.Millisecond - time.Since(arrived))
	relay.mu.Lock()
	order := strings.Join(relay.applied, ",")
	relay.mu.Unlock()
	if got := e.objectBody(t, key); got != "written-by-B" || order != "A,B" {
		t.Fatalf("S3 holds %q, applied in the order %q; want B's object, applied A,B", got, order)
	}
	waitLog(t, p, `"msg":"client_closed"`, `"resource":"`+s3Bucket+"/"+key+`"`)
}

// A gateway stopped (SIGTERM) while a write whose client hung up is still
// with the upstream waits for it before it lets go of its fence, even past
// a shutdown_timeout shorter than the route's: the restarted gateway has
// no record of it, and would forward B's newer write at once.
func TestHangupShutdownWaits(t *testing.T) {
	up := newSlowUpstream(t)
	p := startFencegate(t, strings.Replace(gatewayYAML(up.url), "  listen: $GATEWAY\n",
		"  listen: $GATEWAY\n  shutdown_timeout: 100ms\n", 1))
	const path = "/orders/hangup-shutdown"
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL("gateway"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustWrite(t, conn, rawHead("PUT", path, "gw", "Content-Length: 1")+"A")
	up.waitArrived(t, path)
	arrived := time.Now()
	time.Sleep(hangupAfter)
	conn.Close()
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("fencegate did not exit after SIGTERM")
	}
	if got := tokensApplied(up.rec, path); got != "1" {
		t.Fatalf("fencegate exited before the upstream applied A's write (applied %q)", got)
	}
	waitLog(t, p, "waiting for admitted writes", `"writes":1`)
	p.Restart()
	if st, body := write(t, "PUT", p.URL("gateway")+path, "2", "B"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	time.Sleep(hangupApply - time.Since(arrived))
	if got := tokensApplied(up.rec, path); got != "1,2" {
		t.Fatalf("the upstream applied tokens %q; want 1,2", got)
	}
}
