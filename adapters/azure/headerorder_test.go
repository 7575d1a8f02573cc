package azure

import (
	"context"
	"encoding/base64"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// sdkSigner signs Set Blob Metadata requests with azblob's own Shared Key
// policy and hands back what it sent.
type sdkSigner struct {
	c   *azblob.Client
	cap *capture
	key *sharedKey
}

func newSDKSigner(t testing.TB) *sdkSigner {
	t.Helper()
	key := base64.StdEncoding.EncodeToString([]byte("worker-key-0123456789"))
	cred, err := azblob.NewSharedKeyCredential("worker1", key)
	if err != nil {
		t.Fatal(err)
	}
	cap := &capture{}
	c, err := azblob.NewClientWithSharedKeyCredential("http://gw.example/", cred,
		&azblob.ClientOptions{ClientOptions: policy.ClientOptions{Transport: cap, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	wk, _ := newSharedKey("worker1", key)
	return &sdkSigner{c: c, cap: cap, key: wk}
}

// signed is the request azblob sends to set metadata names on a blob.
func (s *sdkSigner) signed(t testing.TB, names []string) *http.Request {
	t.Helper()
	m := map[string]*string{}
	for i, n := range names {
		m[n] = new(strings.Repeat("v", i+1))
	}
	s.cap.reqs = nil
	s.c.ServiceClient().NewContainerClient("c").NewBlobClient("dir/x").SetMetadata(context.Background(), m, nil)
	if len(s.cap.reqs) != 1 {
		t.Fatalf("azblob sent %d requests", len(s.cap.reqs))
	}
	return s.cap.reqs[0]
}

// check fails unless the gateway's string to sign in the
// service's order gives azblob's signature, and verify accepts it.
func (s *sdkSigner) check(t testing.TB, names []string) {
	t.Helper()
	r := s.signed(t, names)
	sts, err := stringToSign("worker1", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header, r.ContentLength, orderService)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := "SharedKey worker1:"+s.key.mac(sts), r.Header.Get("Authorization"); got != want {
		t.Fatalf("metadata names %q: the gateway's string to sign\n%q\ngives %s; azblob signed %s", names, sts, got, want)
	}
	if _, err := verify(r, map[string]*sharedKey{"worker1": s.key}, time.Now()); err != nil {
		t.Fatalf("metadata names %q: verify: %v", names, err)
	}
}

// The gateway's string to sign is azblob's for metadata names that sort
// differently by bytes and in the service's order (hyphens and
// apostrophes skipped at the first level, case ignored, ...): the
// differential against the SDK's own policy, on fixed cases and on
// random sets of names.
func TestSharedKeyOrderMatchesAzblob(t *testing.T) {
	s := newSDKSigner(t)
	for _, names := range [][]string{
		{"a_b", "a1", "aB"},
		{"a-b", "a_b"},
		{"a_b", "a-b", "a1", "aB", "ab2"},
		{"a'b", "a-b", "ab", "a"},
		{"fencing_token", "fencing-token", "fencingtoken"},
		{"x", "X1", "_", "-a", "a-"},
	} {
		r := s.signed(t, names)
		if canonicalHeaders(r.Header, orderBytes) == canonicalHeaders(r.Header, orderService) {
			t.Fatalf("%q: the case sorts the same by bytes; it tests nothing", names)
		}
		s.check(t, names)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aAbB01_-'"
	differ := 0
	for range 3000 {
		seen := map[string]bool{}
		var names []string
		for range 1 + rng.IntN(6) {
			var b strings.Builder
			for range 1 + rng.IntN(4) {
				b.WriteByte(alphabet[rng.IntN(len(alphabet))])
			}
			// One name per spelling in any case: the SDK keeps one of
			// several at random.
			if n := b.String(); !seen[strings.ToLower(n)] {
				seen[strings.ToLower(n)] = true
				names = append(names, n)
			}
		}
		r := s.signed(t, names)
		if canonicalHeaders(r.Header, orderBytes) != canonicalHeaders(r.Header, orderService) {
			differ++
		}
		s.check(t, names)
	}
	if differ < 500 {
		t.Fatalf("only %d of 3000 random cases sort differently by bytes", differ)
	}
}

// FuzzSharedKeyOrder is the differential with names the fuzzer picks
// (comma-separated, each a header token).
func FuzzSharedKeyOrder(f *testing.F) {
	f.Add("a_b,a-b,a1,aB")
	f.Add("a'b,a-b,ab")
	s := newSDKSigner(f)
	f.Fuzz(func(t *testing.T, list string) {
		seen := map[string]bool{}
		var names []string
		for _, n := range strings.Split(list, ",") {
			if n == "" || seen[strings.ToLower(n)] || strings.IndexFunc(n, func(c rune) bool {
				return c > 0x7e || !(c == '_' || c == '-' || c == '\'' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
			}) >= 0 {
				continue
			}
			seen[strings.ToLower(n)] = true
			names = append(names, n)
		}
		if len(names) > 0 {
			s.check(t, names)
		}
	})
}

// A signer that sorts by bytes (the string-to-sign as the REST
// documentation spells it, which older SDKs and hand-rolled clients
// follow) is accepted too; any other order is not.
func TestSharedKeyByteOrderAccepted(t *testing.T) {
	s := newSDKSigner(t)
	r := s.signed(t, []string{"a_b", "a-b", "a1", "aB"})
	clients := map[string]*sharedKey{"worker1": s.key}
	resign := func(order func([]string)) *http.Request {
		r2 := r.Clone(context.Background())
		sts, _ := stringToSign("worker1", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header, r.ContentLength, orderBytes)
		canon := canonicalHeaders(r.Header, orderBytes)
		hdrs := strings.Split(strings.TrimSuffix(canon, "\n"), "\n")
		order(hdrs)
		sts = strings.Replace(sts, canon, strings.Join(hdrs, "\n")+"\n", 1)
		r2.Header.Set("Authorization", "SharedKey worker1:"+s.key.mac(sts))
		return r2
	}
	if _, err := verify(resign(func([]string) {}), clients, time.Now()); err != nil {
		t.Fatalf("signed in byte order: %v", err)
	}
	reversed := resign(func(h []string) { sort.Sort(sort.Reverse(sort.StringSlice(h))) })
	if _, err := verify(reversed, clients, time.Now()); err != errBadSignature {
		t.Fatalf("signed in reverse byte order: %v; want %v", err, errBadSignature)
	}
}
