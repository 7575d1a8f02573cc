package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

// signedPut is a PutObject signed like aws-sdk-go-v2 signs it, with the
// worker key (access, secret) at t.
func signedPut(tb testing.TB, access, secret, region string, t time.Time) *http.Request {
	tb.Helper()
	body := "hello"
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	r := httptest.NewRequest(http.MethodPut, "http://gateway:8080/bucket/key?x-id=PutObject", strings.NewReader(body))
	r.Header.Set("X-Amz-Content-Sha256", hash)
	r.Header.Set("Fencing-Token", "1")
	err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: access, SecretAccessKey: secret},
		r, hash, "s3", region, t)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func upstreamWithClient(tb testing.TB, access, secret string, now time.Time) *Upstream {
	tb.Helper()
	u, err := New(context.Background(), Options{
		Spec: objectstore.Spec{Route: "objects", Resource: "{bucket}/{key}", Endpoint: "http://127.0.0.1:1",
			Now: func() time.Time { return now }},
		AccessKeyID: "gw", SecretAccessKey: "gw-secret",
		Clients: []Client{{AccessKeyID: access, SecretAccessKey: secret}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// A key rotation (a config reload gives the worker a new secret) never
// accepts the old secret, though its signing key was cached by requests
// before: the new route's upstream has a cache of its own, and a cache
// entry is keyed by the secret itself, so the same cache never hands a key
// derived from one secret to a request checked against another.
func TestKeyRotationRefusesOldSecret(t *testing.T) {
	now := time.Now().UTC()
	old := upstreamWithClient(t, "worker", "old-secret", now)
	for i := 0; i < 3; i++ { // derived, then cached
		if _, err := old.Inspect(signedPut(t, "worker", "old-secret", "us-east-1", now), 0); err != nil {
			t.Fatalf("old secret before the rotation: %v", err)
		}
	}
	if len(old.keys.keys) != 1 {
		t.Fatalf("%d cached keys; want 1", len(old.keys.keys))
	}

	// The reload: a new upstream for the route, with the new secret.
	rotated := upstreamWithClient(t, "worker", "new-secret", now)
	if _, err := rotated.Inspect(signedPut(t, "worker", "old-secret", "us-east-1", now), 0); err == nil ||
		!strings.Contains(err.Error(), "signature does not match") {
		t.Fatalf("old secret after the rotation: %v; want a signature mismatch", err)
	}
	if _, err := rotated.Inspect(signedPut(t, "worker", "new-secret", "us-east-1", now), 0); err != nil {
		t.Fatalf("new secret: %v", err)
	}

	// One cache shared by both secrets (as if a cache outlived a reload):
	// the old secret's cached key is never used for the new secret, nor
	// the new one's for the old.
	shared := &rotated.keys
	old.keys.mu.Lock()
	for s, k := range old.keys.keys {
		shared.put(s.secret, &authRequest{date: s.date, region: s.region, service: s.service}, k)
	}
	old.keys.mu.Unlock()
	for i := 0; i < 2; i++ {
		if _, err := rotated.Inspect(signedPut(t, "worker", "old-secret", "us-east-1", now), 0); err == nil {
			t.Fatal("old secret accepted with its key in the cache")
		}
		if _, err := rotated.Inspect(signedPut(t, "worker", "new-secret", "us-east-1", now), 0); err != nil {
			t.Fatalf("new secret with the old key in the cache: %v", err)
		}
	}

	// The secret never appears in a refusal.
	_, err := rotated.Inspect(signedPut(t, "worker", "old-secret", "us-east-1", now), 0)
	if err == nil || strings.Contains(err.Error(), "old-secret") || strings.Contains(err.Error(), "new-secret") {
		t.Fatalf("refusal %v", err)
	}
}

// Many workers verifying at once, over more scopes than the cache holds:
// every signature is judged right (a wrong one never verifies, a right one
// always does) and the cache stays within its bound. Run with -race.
func TestKeyCacheConcurrent(t *testing.T) {
	now := time.Now().UTC()
	var c keyCache
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				region := fmt.Sprintf("r%d", (g*200+i)%(maxKeys+50))
				secret := fmt.Sprintf("secret-%d", i%3)
				r := signedPut(t, "worker", secret, region, now)
				a, serr := parseAuth(r, now)
				if serr != nil {
					t.Error(serr)
					return
				}
				if _, ok := a.verify(r, secret, &c); !ok {
					t.Errorf("right secret refused (%s, %s)", secret, region)
				}
				if _, ok := a.verify(r, secret+"x", &c); ok {
					t.Errorf("wrong secret accepted (%s, %s)", secret, region)
				}
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.keys) > maxKeys {
		t.Fatalf("%d keys cached, bound %d", len(c.keys), maxKeys)
	}
}
