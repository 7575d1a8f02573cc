package s3_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The worker's SigV4 signature is verified once per request: Inspect's
// verification is handed to Forward, so one clock reading decides it (the
// other reading signs the upstream request).
func TestSignatureVerifiedOnce(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"e"`)
	}))
	t.Cleanup(up.Close)
	var reads atomic.Int64
	gw := workerGateway(t, up.URL, func() time.Time { reads.Add(1); return time.Now() })

	body := "hello"
	sum := sha256.Sum256([]byte(body))
	req, _ := http.NewRequest(http.MethodPut, gw.URL+"/bucket/k", strings.NewReader(body))
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req.Header.Set("Fencing-Token", "1")
	err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "worker", SecretAccessKey: "worker-secret"},
		req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PutObject: %d %s", resp.StatusCode, b)
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("%d clock readings for one request; want 2 (one verification, one upstream signature)", n)
	}
}
