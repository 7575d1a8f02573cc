package azure

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

type capture struct{ reqs []*http.Request }

func (c *capture) Do(r *http.Request) (*http.Response, error) {
	c.reqs = append(c.reqs, r)
	return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// The gateway verifies what azblob's own SharedKeyCredential signs (the
// string to sign is built here, the SDK keeps its own unexported), and
// refuses the same request with a changed path, query, x-ms-* header,
// length, key or a stale date.
func TestVerifyAzblobSignature(t *testing.T) {
	s := newSDKSigner(t)
	c, cap := s.c, s.cap
	ctx := context.Background()
	c.UploadBuffer(ctx, "c", "dir/a b+c", []byte("hello"), &azblob.UploadBufferOptions{Metadata: map[string]*string{"k": new("v")}})
	c.ServiceClient().NewContainerClient("c").NewBlockBlobClient("dir/x").CommitBlockList(ctx, []string{"YmxvY2s="}, nil)
	if len(cap.reqs) != 2 {
		t.Fatalf("captured %d requests", len(cap.reqs))
	}
	wk := s.key
	clients := map[string]*sharedKey{"worker1": wk}
	for _, r := range cap.reqs {
		// As the gateway receives it: the escaped path on the wire.
		if r.ContentLength > 0 && r.Header.Get("Content-Length") == "" {
			r.Header.Set("Content-Length", "5")
		}
		now := time.Now()
		if got, err := verify(r, clients, now); err != nil || got != "worker1" {
			sts, _ := stringToSign("worker1", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header, r.ContentLength, orderService)
			t.Logf("headers %v\nstring to sign %q", r.Header, sts)
			t.Fatalf("%s %s: verify = %q, %v; want worker1", r.Method, r.URL, got, err)
		}
		if !strings.Contains(r.URL.EscapedPath(), "%2F") {
			t.Fatalf("azblob sent %s: want the name's / as %%2F", r.URL.EscapedPath())
		}
		for name, change := range map[string]func(*http.Request){
			"path":   func(r *http.Request) { r.URL.RawPath = ""; r.URL.Path = "/c/other" },
			"query":  func(r *http.Request) { r.URL.RawQuery += "&comp=x" },
			"x-ms":   func(r *http.Request) { r.Header.Set("X-Ms-Meta-Owner", "other") },
			"method": func(r *http.Request) { r.Method = http.MethodDelete },
			"length": func(r *http.Request) { r.Header.Set("Content-Length", "6"); r.ContentLength = 6 },
		} {
			r2 := r.Clone(ctx)
			change(r2)
			if _, err := verify(r2, clients, now); err != errBadSignature {
				t.Errorf("%s changed: verify = %v; want %v", name, err, errBadSignature)
			}
		}
		// A Date header beside x-ms-date is not signed.
		withDate := r.Clone(ctx)
		withDate.Header.Set("Date", "Mon, 01 Jan 2024 00:00:00 GMT")
		if _, err := verify(withDate, clients, now); err != nil {
			t.Errorf("with a Date header beside x-ms-date: %v", err)
		}
		if _, err := verify(r, clients, now.Add(16*time.Minute)); err != errStale {
			t.Errorf("16 minutes later: %v; want %v", err, errStale)
		}
		other, _ := newSharedKey("worker1", base64.StdEncoding.EncodeToString([]byte("another key")))
		if _, err := verify(r, map[string]*sharedKey{"worker1": other}, now); err != errBadSignature {
			t.Errorf("another key: %v; want %v", err, errBadSignature)
		}
		if _, err := verify(r, map[string]*sharedKey{"worker2": wk}, now); err != errUnknownKey {
			t.Errorf("unknown account: %v; want %v", err, errUnknownKey)
		}
	}
}

// One blob, one spelling: %2F and / name the same blob; segments the
// service could resolve or drop are refused.
func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		path, container, blob string
		bad                   bool
	}{
		{"/c/dir%2Fjob", "c", "dir/job", false},
		{"/c/dir/job", "c", "dir/job", false},
		{"/c/a%20b", "c", "a b", false},
		{"/c", "c", "", false},
		{"/c//job", "", "", true},
		{"/c/dir/../job", "", "", true},
		{"/c/dir%2F..%2Fjob", "", "", true},
		{"/c/dir/%2E%2E/job", "", "", true},
		{"/c/dir%2F%2e%2e%2Fjob", "", "", true},
		{"/c/dir%252F..%252Fjob", "c", "dir%2F..%2Fjob", false},
		{"/c/.%2Fjob", "", "", true},
		{"/c/a%5Cb", "", "", true},
		{"/c/a%00b", "", "", true},
		{"/c/a%zz", "", "", true},
	} {
		c, b, _, err := parsePath(tc.path)
		if (err != nil) != tc.bad || (!tc.bad && (c != tc.container || strings.Join(b, "/") != tc.blob)) {
			t.Errorf("parsePath(%q) = %q, %q, %v; want %q, %q, error %v", tc.path, c, b, err, tc.container, tc.blob, tc.bad)
		}
	}
}
