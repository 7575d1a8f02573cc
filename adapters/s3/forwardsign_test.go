package s3

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
)

// The gateway's forwards, signed with its credentials by Upstream.send
// (aws-sdk-go-v2's v4.Signer) and carried by its transport, verify where
// they arrive: the package's verifier, written apart from the signer,
// accepts each form the gateway sends with the gateway's key as a server
// reads it off the wire. And the store reads the query the gateway parsed
// (net/url's reading, re-encoded): a pair the gateway cannot parse does
// not reach the store for it to read its own way.
func TestForwardsVerify(t *testing.T) {
	now := time.Date(2026, 12, 3, 14, 5, 6, 0, time.UTC)
	type seen struct {
		query, host, token string
		err                *s3Error
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s := seen{query: r.URL.RawQuery, host: r.Host, token: r.Header.Get("X-Amz-Security-Token")}
		a, err := parseAuth(r, now)
		switch {
		case err != nil:
			s.err = err
		case a.accessKey != "GATEWAY" || a.region != "eu-west-1":
			s.err = errInvalidAccessKey()
		default:
			if _, ok := a.verify(r, "gateway-secret", &keyCache{}); !ok {
				s.err = errSignatureMismatch()
			}
		}
		got <- s
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name, method, path, query string
		hdr                       map[string][]string
		body                      string
		token                     string
		payload                   string
		wantQuery                 string
	}{
		{name: "put", method: "PUT", path: "/bucket/key", query: "x-id=PutObject", body: strings.Repeat("x", 4096),
			hdr: map[string][]string{"Content-Type": {"application/octet-stream"}, "X-Amz-Checksum-Crc32": {"AAAAAA=="},
				"Amz-Sdk-Invocation-Id": {"abc"}, "Amz-Sdk-Request": {"attempt=1; max=3"}, "Accept-Encoding": {"identity"},
				"User-Agent": {"aws-sdk-go-v2/1.0"}},
			payload: strings.Repeat("a", 64), wantQuery: "x-id=PutObject"},
		{name: "escaped path", method: "HEAD", path: "/b/dir/%C3%BC%20x+y", payload: emptySHA256},
		{name: "multipart query", method: "POST", path: "/b/k", query: "uploads", payload: emptySHA256, wantQuery: "uploads="},
		{name: "query sorted and encoded", method: "PUT", path: "/b/k", query: "uploadId=a%2Fb+c&partNumber=2&z=2&z=1&empty=",
			body: "x", payload: unsignedPayload, wantQuery: "empty=&partNumber=2&uploadId=a%2Fb%20c&z=1&z=2"},
		{name: "unparsable query pairs dropped", method: "GET", path: "/b", query: "list-type=2&a;b=c&prefix=%zz",
			payload: emptySHA256, wantQuery: "list-type=2"},
		{name: "spaces and values", method: "PUT", path: "/b/k", body: "abc", payload: unsignedPayload,
			hdr: map[string][]string{"X-Amz-Meta-A": {"  two  spaces  ", "second"}, "X-Amz-Meta-Tab": {"\tx\t"},
				"If-Match": {`"etag"`}, "X-Amzn-Trace-Id": {"t"}}},
		{name: "session token", method: "DELETE", path: "/b/k", token: "session/token==", payload: emptySHA256,
			hdr: map[string][]string{"X-Amz-Security-Token": {"old"}, "X-Amz-Date": {"stale"}}},
		{name: "root", method: "GET", path: "/", payload: emptySHA256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := New(context.Background(), Options{
				Endpoint: srv.URL, Region: "eu-west-1", AccessKeyID: "GATEWAY", SecretAccessKey: "gateway-secret",
				Clients: []Client{{AccessKeyID: "worker", SecretAccessKey: "worker-secret"}},
				Now:     func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			u.creds = credentials.NewStaticCredentialsProvider("GATEWAY", "gateway-secret", tc.token)
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.body == "" {
				req.Body = http.NoBody
			}
			req.URL.RawQuery = tc.query
			for k, vs := range tc.hdr {
				req.Header[k] = slices.Clone(vs)
			}
			req.Header.Set("X-Amz-Content-Sha256", tc.payload)
			resp, err := u.send(req, tc.payload, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			s := <-got
			if s.err != nil {
				t.Fatalf("the forward does not verify: %s %s", s.err.Code, s.err.Message)
			}
			if s.query != tc.wantQuery {
				t.Errorf("query on the wire %q, want %q", s.query, tc.wantQuery)
			}
			if want, _ := url.Parse(srv.URL); s.host != want.Host {
				t.Errorf("host %q, want %q", s.host, want.Host)
			}
			if s.token != tc.token {
				t.Errorf("X-Amz-Security-Token %q, want %q", s.token, tc.token)
			}
		})
	}
}
