package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// rawAnswer is an answer as it came over the wire: the status line, each
// field line as "name: value" (name as spelled), and the body.
type rawAnswer struct {
	Status string
	Fields []string
	Body   string
}

// wireExchange sends req (with Connection: close) to its URL's host and
// reads the answer's bytes to the end.
func wireExchange(t *testing.T, req *http.Request) rawAnswer {
	t.Helper()
	req.Close = true
	c, err := net.Dial("tcp", req.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	head, body, ok := bytes.Cut(all, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("%s %s: no whole head in %q", req.Method, req.URL, all)
	}
	lines := strings.Split(string(head), "\r\n")
	a := rawAnswer{Status: lines[0], Fields: lines[1:]}
	for _, f := range a.Fields {
		if name, v, _ := strings.Cut(f, ":"); strings.EqualFold(name, "Transfer-Encoding") && strings.TrimSpace(v) == "chunked" {
			body, err = io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(body)))
			if err != nil {
				t.Fatalf("%s %s: chunked body: %v", req.Method, req.URL, err)
			}
		}
	}
	if req.Method == http.MethodHead {
		body = nil
	}
	a.Body = string(body)
	return a
}

// What the gateway must change in an answer, and so is not compared
// byte for byte.
var (
	// Hop-by-hop fields (RFC 9110 §7.6.1): the gateway's own connection
	// to its client is not the upstream's.
	rawHopByHop = []string{"Connection", "Keep-Alive", "Transfer-Encoding"}
	// Fields the server writing the answer frames it by (Go's servers
	// look them up by their canonical name and add them when absent):
	// relayed with the same value, under the canonical spelling.
	rawServerOwned = []string{"Content-Length", "Content-Type", "Content-Encoding", "Date", "Trailer"}
	// Values that change from one request to the next on the upstream
	// itself: the time (Date, to the second) and S3's request ids. Their
	// names are compared, their values not.
	rawPerRequest = []string{"Date", "X-Amz-Request-Id", "X-Amz-Id-2"}
)

// comparable returns a's fields as compared: hop-by-hop ones dropped,
// server-owned names folded to canonical, per-request values blanked, in
// sorted order (Go's servers write fields sorted by name, the upstream in
// its own order: order carries no meaning in HTTP but for fields of one
// name, whose values stay in order).
func (a rawAnswer) comparable() rawAnswer {
	out := rawAnswer{Status: a.Status, Body: a.Body}
	for _, f := range a.Fields {
		name, v, _ := strings.Cut(f, ":")
		canon := http.CanonicalHeaderKey(name)
		switch {
		case containsFold(rawHopByHop, name):
			continue
		case containsFold(rawServerOwned, name):
			name = canon
		}
		v = strings.TrimSpace(v)
		if containsFold(rawPerRequest, name) {
			v = "(per request)"
		}
		out.Fields = append(out.Fields, name+": "+v)
	}
	sort.SliceStable(out.Fields, func(i, j int) bool {
		ni, _, _ := strings.Cut(out.Fields[i], ":")
		nj, _, _ := strings.Cut(out.Fields[j], ":")
		return ni < nj
	})
	return out
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}

func compareRaw(t *testing.T, what string, direct, gw rawAnswer) {
	t.Helper()
	d, g := direct.comparable(), gw.comparable()
	if d.Status != g.Status || d.Body != g.Body || strings.Join(d.Fields, "\n") != strings.Join(g.Fields, "\n") {
		t.Errorf("%s: the answer through the gateway differs from the upstream's\n direct:  %q\n %q\n gateway: %q\n %q\n body direct %q, through the gateway %q",
			what, d.Status, d.Fields, g.Status, g.Fields, d.Body, g.Body)
	}
}

// hasField reports whether a has a field spelled exactly name.
func (a rawAnswer) hasField(name string) bool {
	for _, f := range a.Fields {
		if n, _, _ := strings.Cut(f, ":"); n == name {
			return true
		}
	}
	return false
}

// Answers reach the worker as the upstream sent them: status line, field
// names with their case, values and body, direct and through the gateway,
// but for the exceptions listed above. Python's http.server sends names
// as the application spells them (x-amz-meta-foo, x-Mixed-CASE); both
// server paths of the gateway are checked.
func TestRawAnswerHTTPRoute(t *testing.T) {
	up := startEarlyUpstream(t)
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast_path=%v", fast), func(t *testing.T) {
			yaml := gatewayYAML(up)
			yaml = strings.Replace(yaml, "gateway:\n", fmt.Sprintf("gateway:\n  fast_path: %v\n", fast), 1)
			gw := startFencegate(t, yaml)
			get := func(base string) rawAnswer {
				req, _ := http.NewRequest("GET", base+"/orders/read-7", nil)
				return wireExchange(t, req)
			}
			direct, through := get(up), get(gw.URL("gateway"))
			if !direct.hasField("x-amz-meta-foo") || !direct.hasField("x-Mixed-CASE") {
				t.Fatalf("the upstream's own answer lacks the lower-case names this test needs: %q", direct.Fields)
			}
			compareRaw(t, "GET", direct, through)
		})
	}
}

// The same on an S3 route against VersityGW: an object written with user
// metadata through the gateway, read (GET and HEAD) directly with the
// store's keys and through the gateway with the worker's.
func TestRawAnswerS3Route(t *testing.T) {
	e := startS3Env(t, "")
	_, err := e.worker(tokenOf(1)).PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(s3Bucket), Key: aws.String("meta/obj"), Body: strings.NewReader("payload"),
		Metadata: map[string]string{"foo": "bar", "mixed-Case": "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	signed := func(method, base, access, secret string) *http.Request {
		u, _ := url.Parse(base + "/" + s3Bucket + "/meta/obj")
		req, _ := http.NewRequest(method, u.String(), nil)
		const empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
		req.Header.Set("X-Amz-Content-Sha256", empty)
		if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: access, SecretAccessKey: secret},
			req, empty, "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		return req
	}
	for _, method := range []string{"GET", "HEAD"} {
		direct := wireExchange(t, signed(method, e.S3.Endpoint, e.S3.AccessKey, e.S3.SecretKey))
		through := wireExchange(t, signed(method, e.GW, s3WorkerKey, s3WorkerSecret))
		if !strings.Contains(direct.Status, "200") || !direct.hasField("x-amz-meta-foo") {
			t.Fatalf("%s directly: %q %q: not the lower-case metadata names this test needs", method, direct.Status, direct.Fields)
		}
		compareRaw(t, method, direct, through)
	}
}
