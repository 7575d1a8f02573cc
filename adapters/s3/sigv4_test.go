package s3

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// appendHeaderValue writes values unchanged when strings.Fields would not
// change them, and folded exactly as strings.Fields joins them otherwise.
func TestHeaderValueFolding(t *testing.T) {
	for _, v := range []string{"", "a", "a b", " a", "a ", "a  b", "a\tb", "a\u00a0b", "\u2003", " ", "x-amz-meta-a:b", "  lead and  inner  "} {
		r := &http.Request{Header: http.Header{"X-Test": {v, v}}}
		got := string(appendHeaderValue(nil, r, "x-test", formSpec))
		f := strings.Join(strings.Fields(v), " ")
		if want := f + "," + f; got != want {
			t.Errorf("%q: got %q, want %q", v, got, want)
		}
	}
}

// Signing keys are cached only for scopes that verified a signature, and
// the cache is bounded.
func TestKeyCacheOnlyVerified(t *testing.T) {
	var c keyCache
	now := time.Now().UTC()
	for i := 0; i < 3*maxKeys; i++ {
		a := &authRequest{date: now.Format("20060102"), region: "r" + strings.Repeat("x", i), service: "s3",
			amzDateRaw: now.Format(amzDateFormat), signature: strings.Repeat("0", 64), signedHeaders: []string{"host"}, payloadHash: unsignedPayload}
		r, _ := http.NewRequest(http.MethodGet, "http://h/b/k", nil)
		if _, ok := a.verify(r, "secret", &c); ok {
			t.Fatal("a zero signature verified")
		}
	}
	if len(c.keys) != 0 {
		t.Fatalf("%d keys cached for signatures that did not verify", len(c.keys))
	}
	for i := 0; i < 3*maxKeys; i++ {
		c.put("s", &authRequest{date: "20260101", region: strings.Repeat("x", i), service: "s3"}, []byte("k"))
	}
	if len(c.keys) > maxKeys {
		t.Fatalf("%d keys cached, bound %d", len(c.keys), maxKeys)
	}
}
