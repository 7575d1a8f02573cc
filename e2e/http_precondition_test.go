package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// httpRouteYAML is one plain HTTP route to url with the given precondition
// and timeout; host "" matches any host.
func httpRouteYAML(name, host, url, precondition, timeout string) string {
	match := "{path_prefix: /}"
	if host != "" {
		match = fmt.Sprintf("{host: %s, path_prefix: /}", host)
	}
	pre := ""
	if precondition != "" {
		pre = "      precondition: " + precondition + "\n"
	}
	return fmt.Sprintf(`    - name: %s
      match: %s
      upstream: {url: %q, timeout: %s}
      resource: "{path}"
%s`, name, match, url, timeout, pre)
}

func httpGatewayYAML(routes ...string) string {
	return "gateway:\n  listen: $GATEWAY\n  routes:\n" + strings.Join(routes, "") +
		"store:\n  embedded: {path: $DIR/fencegate.db}\nadmin: {listen: $ADMIN}\n"
}

// apacheFile reads a file as Apache stored it, never through the gateway.
func apacheFile(t *testing.T, a *testenv.ApacheServer, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.Root, name))
	if os.IsNotExist(err) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// refusalCode is the error code of a fencegate JSON refusal ("" if none).
func refusalCode(body string) string {
	var e struct {
		Error string `json:"error"`
	}
	json.Unmarshal([]byte(body), &e)
	return e.Error
}

// Seed test 2 on a plain HTTP upstream, real Apache httpd with mod_dav: A's
// PUT is handed to Apache but delayed in the network (toxiproxy) past the
// gateway's timeout; B then writes with a newer token. Without the
// precondition A's late PUT overwrites B's file. With `precondition: etag`
// A's PUT carries If-Match on the version B replaced and Apache refuses it
// with 412; B's file stays. The gateway then keeps writing (its record is
// B's version, Apache's weak ETag for the second after each write waited
// out), and a write that bypassed it is answered precondition_failed. A's
// own If-Match: * (any version, B's included) does not take the place of
// the gateway's condition.
func TestHTTPPreconditionDelayedForward(t *testing.T) {
	for _, tc := range []struct {
		name, precondition string
		own                [][2]string // A's own headers on its delayed write
		want               string
	}{
		{"etag", "etag", nil, "B"},
		{"etag_own_if_match_any", "etag", [][2]string{{"If-Match", "*"}}, "B"},
		{"none", "none", nil, "A-late"}, // control: shows the test can fail
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := testenv.Apache(t)
			proxy := testenv.Toxiproxy(t).Proxy(t, "apache", strings.TrimPrefix(a.URL, "http://"))
			// Two routes to one Apache and one fence: requests to
			// "localhost" go through the delaying proxy, to 127.0.0.1
			// straight to Apache.
			p := startFencegate(t, httpGatewayYAML(
				httpRouteYAML("slow", "localhost", "http://"+proxy.Listen, tc.precondition, "1s"),
				httpRouteYAML("fast", "", a.URL, tc.precondition, "30s")))
			gw := p.URL("gateway")
			slow := strings.Replace(gw, "127.0.0.1", "localhost", 1)

			if st, body := write(t, "PUT", gw+"/job.txt", "1", "A-first"); st != http.StatusCreated {
				t.Fatalf("A's first write: %d %s", st, body)
			}
			// A's next write starts after Apache's weak-ETag second, so
			// all of its time goes to the delayed network.
			time.Sleep(1200 * time.Millisecond)
			proxy.AddToxic(t, testenv.Toxic{Name: "delay", Type: "latency", Stream: "upstream",
				Attributes: map[string]any{"latency": 3000}})
			sent := time.Now()
			if st, body := send(t, "PUT", slow+"/job.txt", append([][2]string{{"Fencing-Token", "1"}}, tc.own...), "A-late"); st != http.StatusGatewayTimeout || refusalCode(body) != "upstream_timeout" {
				t.Fatalf("A's delayed write: %d %s; want 504 upstream_timeout", st, body)
			}
			if st, body := write(t, "PUT", gw+"/job.txt", "2", "B"); st/100 != 2 {
				t.Fatalf("B's write: %d %s", st, body)
			}
			// Wait until A's delayed request has been delivered to Apache
			// and answered there (the latency plus a margin).
			time.Sleep(time.Until(sent.Add(5 * time.Second)))
			if got := apacheFile(t, a, "job.txt"); got != tc.want {
				t.Fatalf("file = %q; want %q", got, tc.want)
			}
			if tc.name != "etag" {
				return
			}
			// B goes on writing, within Apache's weak-ETag second and after.
			for i, body := range []string{"B2", "B3"} {
				if st, resp := write(t, "PUT", gw+"/job.txt", "2", body); st/100 != 2 {
					t.Fatalf("B's write %d: %d %s", i+2, st, resp)
				}
			}
			if got := apacheFile(t, a, "job.txt"); got != "B3" {
				t.Fatalf("file = %q; want B3", got)
			}
			// A write that bypassed the gateway is detected, not overwritten,
			// and the refusal keeps the record: refused again.
			req, _ := http.NewRequest("PUT", a.URL+"/job.txt", strings.NewReader("bypass"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			for range 2 {
				st, body := write(t, "PUT", gw+"/job.txt", "2", "B4")
				if st != http.StatusPreconditionFailed || refusalCode(body) != "precondition_failed" {
					t.Fatalf("write after a bypass: %d %s; want 412 precondition_failed", st, body)
				}
			}
			if got := apacheFile(t, a, "job.txt"); got != "bypass" {
				t.Fatalf("file = %q; want the bypassing write left alone", got)
			}
		})
	}
}

// The first write of an object the gateway knows absent carries
// If-None-Match: *: a file created behind the gateway's back is not
// overwritten. A DELETE is conditional on the recorded ETag, and afterwards
// the object is known absent again. A gateway restart (no memory of when it
// saw Apache's weak ETag) polls HEAD until it is strong and writes on.
func TestHTTPPreconditionApacheLifecycle(t *testing.T) {
	a := testenv.Apache(t)
	p := startFencegate(t, httpGatewayYAML(httpRouteYAML("files", "", a.URL, "etag", "10s")))
	gw := p.URL("gateway")

	if err := os.WriteFile(filepath.Join(a.Root, "pre.txt"), []byte("pre"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, body := write(t, "PUT", gw+"/pre.txt", "1", "x"); st != http.StatusPreconditionFailed || refusalCode(body) != "precondition_failed" {
		t.Fatalf("PUT over a file the gateway never wrote: %d %s; want 412 precondition_failed", st, body)
	}
	if got := apacheFile(t, a, "pre.txt"); got != "pre" {
		t.Fatalf("pre.txt = %q; want it left alone", got)
	}

	if st, body := write(t, "PUT", gw+"/doc.txt", "1", "v1"); st != http.StatusCreated {
		t.Fatalf("first PUT: %d %s", st, body)
	}
	p.Kill9()
	p.Restart()
	if st, body := write(t, "PUT", gw+"/doc.txt", "1", "v2"); st/100 != 2 {
		t.Fatalf("PUT after a restart within the weak-ETag second: %d %s", st, body)
	}
	if st, body := write(t, "DELETE", gw+"/doc.txt", "1", ""); st/100 != 2 {
		t.Fatalf("DELETE: %d %s", st, body)
	}
	if got := apacheFile(t, a, "doc.txt"); got != "<absent>" {
		t.Fatalf("doc.txt = %q after DELETE", got)
	}
	// Known absent: recreated with If-None-Match: *.
	if st, body := write(t, "PUT", gw+"/doc.txt", "1", "v3"); st != http.StatusCreated {
		t.Fatalf("PUT after DELETE: %d %s", st, body)
	}
	if got := apacheFile(t, a, "doc.txt"); got != "v3" {
		t.Fatalf("doc.txt = %q; want v3", got)
	}
}
