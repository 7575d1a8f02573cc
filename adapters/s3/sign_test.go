package s3

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The gateway's upstream signer signs exactly as aws-sdk-go-v2's v4.Signer
// (with DisableURIPathEscaping, as the gateway used it): same signature,
// same signed headers, same query and host on the wire, for the forms the
// gateway forwards.
func TestUpstreamSignerMatchesSDK(t *testing.T) {
	now := time.Date(2026, 12, 3, 14, 5, 6, 0, time.UTC)
	for _, tc := range []struct {
		name, method, url string
		hdr               map[string][]string
		length            int64
		token             string
		payload           string
	}{
		{name: "put", method: "PUT", url: "http://127.0.0.1:7070/bucket/key?x-id=PutObject", length: 4096,
			hdr: map[string][]string{"Content-Type": {"application/octet-stream"}, "X-Amz-Checksum-Crc32": {"AAAAAA=="},
				"Amz-Sdk-Invocation-Id": {"abc"}, "Amz-Sdk-Request": {"attempt=1; max=3"}, "Accept-Encoding": {"identity"},
				"User-Agent": {"aws-sdk-go-v2/1.0"}, "Content-Length": {"4096"}},
			payload: strings.Repeat("a", 64)},
		{name: "head", method: "HEAD", url: "http://s3.local/b/dir/%C3%BC%20x+y", payload: emptySHA256},
		{name: "default port", method: "GET", url: "http://s3.local:80/b/k", payload: unsignedPayload},
		{name: "https default port", method: "GET", url: "https://s3.local:443/b/k", payload: unsignedPayload},
		{name: "odd port kept", method: "GET", url: "https://s3.local:8443/b/k", payload: unsignedPayload},
		{name: "multipart query", method: "POST", url: "http://s3.local/b/k?uploads", payload: emptySHA256},
		{name: "query sorted and encoded", method: "PUT", url: "http://s3.local/b/k?uploadId=a%2Fb+c&partNumber=2&z=2&z=1&empty=", length: 1,
			payload: unsignedPayload},
		{name: "unparsable query pair", method: "GET", url: "http://s3.local/b?list-type=2&a;b=c&prefix=%zz", payload: emptySHA256},
		{name: "spaces and values", method: "PUT", url: "http://s3.local/b/k", length: 3, payload: streamingUnsigned,
			hdr: map[string][]string{"X-Amz-Meta-A": {"  two  spaces  ", "second"}, "X-Amz-Meta-Tab": {"\tx\t"},
				"If-Match": {`"etag"`}, "Expect": {"100-continue"}, "Transfer-Encoding": {"chunked"}, "X-Amzn-Trace-Id": {"t"},
				"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {"3"}, "X-Amz-Trailer": {"x-amz-checksum-crc32"}}},
		{name: "session token", method: "DELETE", url: "http://s3.local/b/k", token: "session/token==", payload: emptySHA256,
			hdr: map[string][]string{"X-Amz-Security-Token": {"old"}, "X-Amz-Date": {"stale"}}},
		{name: "root", method: "GET", url: "http://s3.local", payload: emptySHA256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk := func() *http.Request {
				r, err := http.NewRequest(tc.method, tc.url, nil)
				if err != nil {
					t.Fatal(err)
				}
				for k, vs := range tc.hdr {
					r.Header[k] = append([]string(nil), vs...)
				}
				r.ContentLength = tc.length
				return r
			}
			creds := aws.Credentials{AccessKeyID: "GATEWAY", SecretAccessKey: "gateway-secret", SessionToken: tc.token}
			want := mk()
			sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
			if err := sdk.SignHTTP(context.Background(), creds, want, tc.payload, "s3", "eu-west-1", now); err != nil {
				t.Fatal(err)
			}
			got := mk()
			s := &upstreamSigner{region: "eu-west-1"}
			s.sign(got, creds, tc.payload, now)
			for _, k := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
				if g, w := got.Header.Values(k), want.Header.Values(k); strings.Join(g, "|") != strings.Join(w, "|") {
					t.Errorf("%s:\n got %q\nwant %q", k, g, w)
				}
			}
			if got.URL.RawQuery != want.URL.RawQuery || got.Host != want.Host {
				t.Errorf("query %q host %q; want %q %q", got.URL.RawQuery, got.Host, want.URL.RawQuery, want.Host)
			}
			// Signed twice (the day's key cached), the same.
			again := mk()
			s.sign(again, creds, tc.payload, now)
			if again.Header.Get("Authorization") != want.Header.Get("Authorization") {
				t.Error("second signature differs")
			}
		})
	}
}

// canonicalForm accepts a query only where the SDK's re-encoding would
// leave it unchanged.
func TestCanonicalForm(t *testing.T) {
	for _, raw := range []string{
		"x-id=PutObject", "a=1&b=2", "b=2&a=1", "a=2&a=1", "a=1&a=2", "a=&b=", "uploads", "a=1&&b=2", "a=b=c",
		"a=%20", "a=+", "a=~._-", "A=1&a=1", "a=1&A=1", "=1", "a=1;b=2", "ab=1&a=2", "a=2&ab=1", "a-b=1&a=2",
		"a=1&", "&a=1", "&", "a=1&b=2&", "x-id=PutObject&",
	} {
		q, _ := url.ParseQuery(raw)
		for _, vs := range q {
			slices.Sort(vs)
		}
		same := strings.ReplaceAll(q.Encode(), "+", "%20") == raw
		if got := canonicalForm(raw); got && !same {
			t.Errorf("canonicalForm(%q) = true; the SDK re-encodes it to %q", raw, q.Encode())
		}
	}
}

func BenchmarkUpstreamSign(b *testing.B) {
	creds := aws.Credentials{AccessKeyID: "GATEWAY", SecretAccessKey: "gateway-secret"}
	now := time.Now()
	mk := func() *http.Request {
		r, _ := http.NewRequest("PUT", "http://127.0.0.1:7070/bucket/key?x-id=PutObject", nil)
		r.ContentLength = 4096
		r.Header.Set("Content-Type", "application/octet-stream")
		r.Header.Set("X-Amz-Checksum-Crc32", "AAAAAA==")
		r.Header.Set("Amz-Sdk-Invocation-Id", "4b4d8f0e-7c1e-4c1e-9b0a-1c2d3e4f5a6b")
		r.Header.Set("Amz-Sdk-Request", "attempt=1; max=3")
		r.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		return r
	}
	b.Run("sdk", func(b *testing.B) {
		sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		b.ReportAllocs()
		for b.Loop() {
			sdk.SignHTTP(context.Background(), creds, mk(), emptySHA256, "s3", "us-east-1", now)
		}
	})
	b.Run("gateway", func(b *testing.B) {
		s := &upstreamSigner{region: "us-east-1"}
		b.ReportAllocs()
		for b.Loop() {
			s.sign(mk(), creds, emptySHA256, now)
		}
	})
}
