package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/server"
)

// FuzzS3Oracle generates more write shapes from the oracle's (its seeds)
// and sends each with token 5 to the oracle's gateway and store
// (startS3Oracle): method, addressing, raw path, raw query, one header and
// the body are the fuzzer's. A shape the gateway refuses changes nothing;
// one it forwards was fenced on keys it found unfenced, and may create
// objects or buckets of its own, but must not touch what the seeded state
// holds: no file, folder, part or extended attribute (tags, metadata,
// retention, legal hold, bucket settings) of it may change or go. The
// check compares the seeded snapshot's lines with the store's after each
// input (a directory's modification time aside: a new object in a bucket
// changes the bucket directory's).
//
//	go test ./e2e -run '^$' -fuzz '^FuzzS3Oracle$' -fuzztime 10m
func FuzzS3Oracle(f *testing.F) {
	for _, s := range oracleShapes() {
		var hname, hval string
		for k, v := range s.header {
			hname, hval = k, v
		}
		f.Add(s.method, s.vhost != "", s.path, s.query, hname, hval, s.body)
	}
	if testing.Short() {
		f.Skip("starts VersityGW and the gateway")
	}
	// The gateway runs in this process: the fuzzer's coverage then
	// includes its classification, and a restarted worker does not build
	// and start a binary.
	e, uploadID := startS3Oracle(f, inProcessGateway)
	gw := strings.TrimPrefix(e.GW, "http://")
	seeded := stateByPath(versityState(f, e.S3.Dir))
	f.Fuzz(func(t *testing.T, method string, vhost bool, p, query, hname, hval, body string) {
		s := s3Shape{name: "fuzzed", method: method, path: p, body: body,
			query: strings.ReplaceAll(query, oracleUploadID, uploadID)}
		if vhost {
			s.vhost = "fenced.s3.internal"
		}
		switch http.CanonicalHeaderKey(hname) {
		case "Fencing-Token", "Expect", "Content-Length", "Transfer-Encoding", "Host", "Connection":
			// The token is the oracle's; the others frame the request
			// (a client waiting for 100-continue, a body it never sends).
			return
		}
		if hname != "" {
			s.header = map[string]string{hname: hval}
		}
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#") || strings.ContainsAny(query, "#") ||
			!validHeader(hname, hval) || method == http.MethodConnect {
			return // not a request a client sends as written
		}
		if _, _, err := sendShape(gw, s, 5); err != nil {
			return // refused below HTTP (or not a valid request)
		}
		now := stateByPath(versityState(t, e.S3.Dir))
		for p, lines := range seeded {
			if got := now[p]; !sameState(lines, got) {
				t.Fatalf("%s %s?%s (vhost %v, %s: %q, body %q) with token 5 changed the seeded %s:\n%s",
					method, s.path, s.query, vhost, hname, hval, body, p, stateDiff(lines, got))
			}
		}
	})
}

// inProcessGateway serves the configuration yaml ($GATEWAY, $ADMIN and
// $DIR filled in) in this process until the test ends, and returns the
// gateway's base URL.
func inProcessGateway(t testing.TB, yaml string) string {
	t.Helper()
	yaml = strings.NewReplacer(
		"$GATEWAY", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"$ADMIN", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"$DIR", t.TempDir()).Replace(yaml)
	cfg, err := config.Parse("oracle.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := server.New(ctx, cfg, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return "http://" + srv.Addr("gateway")
}

// stateByPath groups versityState's lines by the path they describe.
func stateByPath(lines []string) map[string][]string {
	m := map[string][]string{}
	for _, l := range lines {
		p, _, _ := strings.Cut(l, "\t")
		m[p] = append(m[p], l)
	}
	return m
}

// sameState compares one path's lines, ignoring a directory's
// modification time (it changes when an entry is added below it).
func sameState(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !(isDirLine(a[i]) && dirLineSansTime(a[i]) == dirLineSansTime(b[i])) {
			return false
		}
	}
	return true
}

func isDirLine(l string) bool { return strings.Contains(l, "\td--------- mtime=") }

func dirLineSansTime(l string) string {
	i := strings.Index(l, " mtime=")
	if i < 0 {
		return l
	}
	return l[:i]
}

// validHeader reports whether name and value can be sent as one header
// field as written ("" name: none).
func validHeader(name, value string) bool {
	if name == "" {
		return true
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
