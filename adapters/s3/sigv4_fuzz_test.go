package s3

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"golang.org/x/net/http/httpguts"
)

var fuzzMethods = []string{"GET", "PUT", "POST", "DELETE", "HEAD"}

// fuzzRequest builds a request from fuzz input as a worker's SDK would
// send it (path-style, the x-amz-content-sha256 header set), or nil if the
// input does not make one.
func fuzzRequest(method byte, path, query, hname, hval string, length int64, payload string) *http.Request {
	u := &url.URL{Scheme: "http", Host: "gw.local:8080", Path: "/bucket/" + path, RawQuery: query}
	r, err := http.NewRequest(fuzzMethods[int(method)%len(fuzzMethods)], u.String(), nil)
	if err != nil {
		return nil
	}
	if hname != "" {
		// A field net/http's client would refuse to send is no request.
		if !httpguts.ValidHeaderFieldName(hname) || !httpguts.ValidHeaderFieldValue(hval) {
			return nil
		}
		r.Header[http.CanonicalHeaderKey(hname)] = []string{hval}
	}
	r.Header.Set("X-Amz-Content-Sha256", payload)
	r.ContentLength = length
	return r
}

// overWire writes r as a client does and reads it back as the gateway's
// server does: what the verifier sees. nil if net/http refuses it either
// way.
func overWire(r *http.Request) *http.Request {
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		return nil
	}
	got, err := http.ReadRequest(bufio.NewReader(&b))
	if err != nil {
		return nil
	}
	return got
}

var fuzzPayloads = []string{emptySHA256, unsignedPayload, strings.Repeat("ab", 32)}

// FuzzSigV4Verify: every request aws-sdk-go-v2's signer signs (as S3
// clients use it) verifies with the gateway's verifier after a trip over
// the wire, and a change to any part the signature covers (method, path,
// query, host, a signed header's value, the date, the payload hash) is
// refused. mutate picks the part changed.
func FuzzSigV4Verify(f *testing.F) {
	f.Add(uint8(1), "key", "x-id=PutObject", "Content-Type", "text/plain", int64(5), uint8(0), uint8(0))
	f.Add(uint8(0), "dir/ü x+y", "list-type=2&prefix=a%2Fb", "X-Amz-Meta-A", "  two  spaces ", int64(0), uint8(1), uint8(3))
	f.Add(uint8(2), "k", "uploads", "If-Match", `"etag"`, int64(0), uint8(2), uint8(5))
	f.Add(uint8(3), "a/../b", "a=1&a=0&b=", "X-Amz-Meta-Tab", "\tx\t", int64(0), uint8(0), uint8(6))
	f.Add(uint8(4), "%41", "uploadId=a%2Fb+c&partNumber=2", "Range", "bytes=0-1", int64(0), uint8(1), uint8(7))
	f.Add(uint8(1), "k", "", "X-Amz-Meta-Inner", "a\tb \u00a0c", int64(3), uint8(0), uint8(4))
	now := time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC)
	u := &Upstream{clients: map[string]string{"WORKER": "worker-secret"}, now: func() time.Time { return now }}
	creds := aws.Credentials{AccessKeyID: "WORKER", SecretAccessKey: "worker-secret"}
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	f.Fuzz(func(t *testing.T, method uint8, path, query, hname, hval string, length int64, payload, mutate uint8) {
		if length < 0 || length > 1<<40 {
			return
		}
		ph := fuzzPayloads[int(payload)%len(fuzzPayloads)]
		r := fuzzRequest(method, path, query, hname, hval, length, ph)
		if r == nil {
			return
		}
		if err := sdk.SignHTTP(context.Background(), creds, r, ph, "s3", "us-east-1", now); err != nil {
			return
		}
		in := overWire(r)
		if in == nil {
			return
		}
		if _, _, serr := u.authenticate(in); serr != nil {
			t.Fatalf("a request the SDK signed is refused: %s %s\n%v\nrequest %s %q %v", serr.Code, serr.Message,
				in.Header.Get("Authorization"), in.Method, in.RequestURI, in.Header)
		}

		// A change to a signed part: made on the signed request before it
		// goes over the wire, so the change is one a client could send.
		m := r.Clone(context.Background())
		signed := signedHeaderNames(r.Header.Get("Authorization"))
		switch mutate % 8 {
		case 0:
			m.Method = fuzzMethods[(int(method)+1)%len(fuzzMethods)]
		case 1:
			m.URL.Path += "x"
			m.URL.RawPath = ""
		case 2:
			if m.URL.RawQuery != "" {
				m.URL.RawQuery += "&"
			}
			m.URL.RawQuery += "zz=1"
		case 3:
			m.Host = "other.local:8080"
		case 4:
			// A signed header other than the ones every request has.
			name := ""
			for _, s := range signed {
				switch s {
				case "host", "x-amz-date", "x-amz-content-sha256", "content-length":
				default:
					name = s
				}
			}
			if name == "" {
				return
			}
			k := http.CanonicalHeaderKey(name)
			m.Header[k] = []string{strings.Join(m.Header[k], ",") + "x"}
		case 5:
			m.Header.Set("X-Amz-Date", now.Add(time.Second).Format(amzDateFormat))
		case 6:
			alt := fuzzPayloads[(int(payload)+1)%len(fuzzPayloads)]
			m.Header.Set("X-Amz-Content-Sha256", alt)
		case 7:
			if !contains(signed, "content-length") {
				return
			}
			m.ContentLength++
		}
		min := overWire(m)
		if min == nil {
			return
		}
		if a, _, serr := u.authenticate(min); serr == nil {
			t.Fatalf("a request changed after signing (mutation %d) verified: %s %q %v (signed %v)", mutate%8, min.Method, min.RequestURI, min.Header, a.signedHeaders)
		}
	})
}

func signedHeaderNames(auth string) []string {
	_, rest, ok := strings.Cut(auth, "SignedHeaders=")
	if !ok {
		return nil
	}
	list, _, _ := strings.Cut(rest, ",")
	return strings.Split(list, ";")
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// FuzzUpstreamSignerMatchesSDK: the gateway's upstream signer gives the
// signature, signed headers, query and host aws-sdk-go-v2's signer gives
// (with DisableURIPathEscaping, as S3 is signed) for any request.
func FuzzUpstreamSignerMatchesSDK(f *testing.F) {
	f.Add(uint8(1), "key", "x-id=PutObject", "Content-Type", "application/octet-stream", int64(4096), uint8(0), "")
	f.Add(uint8(4), "dir/%C3%BC x+y", "", "X-Amz-Meta-A", "  two  spaces  ", int64(0), uint8(1), "session/token==")
	f.Add(uint8(2), "k", "uploadId=a%2Fb+c&partNumber=2&z=2&z=1&empty=", "Expect", "100-continue", int64(1), uint8(2), "")
	f.Add(uint8(0), "", "list-type=2&a;b=c&prefix=%zz", "X-Amzn-Trace-Id", "t", int64(0), uint8(0), "")
	now := time.Date(2026, 12, 3, 14, 5, 6, 0, time.UTC)
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	s := &upstreamSigner{region: "eu-west-1"}
	f.Fuzz(func(t *testing.T, method uint8, path, query, hname, hval string, length int64, payload uint8, token string) {
		if length < 0 {
			return
		}
		ph := fuzzPayloads[int(payload)%len(fuzzPayloads)]
		mk := func() *http.Request {
			r := fuzzRequest(method, path, query, hname, hval, length, ph)
			if r != nil {
				r.Header.Del("X-Amz-Content-Sha256")
			}
			return r
		}
		want := mk()
		if want == nil {
			return
		}
		creds := aws.Credentials{AccessKeyID: "GATEWAY", SecretAccessKey: "gateway-secret", SessionToken: token}
		if err := sdk.SignHTTP(context.Background(), creds, want, ph, "s3", "eu-west-1", now); err != nil {
			return
		}
		got := mk()
		s.sign(got, creds, ph, now)
		for _, k := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
			if g, w := got.Header.Values(k), want.Header.Values(k); strings.Join(g, "|") != strings.Join(w, "|") {
				t.Fatalf("%s:\n got %q\nwant %q\nrequest %s %s %v", k, g, w, want.Method, want.URL, want.Header)
			}
		}
		if got.URL.RawQuery != want.URL.RawQuery || got.Host != want.Host {
			t.Fatalf("query %q host %q; want %q %q", got.URL.RawQuery, got.Host, want.URL.RawQuery, want.Host)
		}
	})
}
