package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The gateway does not hash a body itself: it signs the worker's verified
// x-amz-content-sha256 into the upstream request and S3 checks the body
// against it. A body that does not match its signed hash (the worker's
// signature covers the hash, not the bytes) must then still never be
// written: against real VersityGW, small bodies (read whole by the gateway)
// and streamed ones, with and without Expect: 100-continue, on a plain and
// a `precondition: etag` route. The object keeps its content, and on the
// etag route the next write goes through (a refused write leaves no
// bookkeeping that blocks it).
func TestS3PayloadHashMismatchNotWritten(t *testing.T) {
	for _, pre := range []string{"", "etag"} {
		t.Run("precondition="+pre, func(t *testing.T) {
			e := startS3Env(t, pre)
			tok := int64(1)
			if err := putObject(t, e.worker(tokenOf(tok)), "obj", "original"); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name   string
				size   int
				expect bool
			}{
				{"4KiB", 4 << 10, false},
				{"4KiB expect", 4 << 10, true},
				{"1MiB", 1 << 20, false},
				{"1MiB expect", 1 << 20, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					signed := bytes.Repeat([]byte("s"), tc.size)
					sent := bytes.Clone(signed)
					sent[len(sent)-1] = 't' // same length, one byte off
					sum := sha256.Sum256(signed)
					tok++
					st, body := e.signedPut(t, "obj", sent, hex.EncodeToString(sum[:]), tok, tc.expect)
					if st != http.StatusBadRequest || !strings.Contains(body, "<Code>XAmzContentSHA256Mismatch</Code>") {
						t.Fatalf("tampered body: %d %s; want 400 XAmzContentSHA256Mismatch", st, body)
					}
					if got := e.objectBody(t, "obj"); got != "original" {
						t.Fatalf("object is %d bytes after a tampered put; want the original", len(got))
					}
				})
			}
			tok++
			if err := putObject(t, e.worker(tokenOf(tok)), "obj", "next"); err != nil {
				t.Fatalf("write after the refused ones: %v", err)
			}
			if got := e.objectBody(t, "obj"); got != "next" {
				t.Fatalf("object %q; want next", got)
			}
		})
	}
}

// signedPut sends a PutObject of body through the gateway, signed with the
// worker's key for the payload hash given (which need not be body's).
func (e *s3Env) signedPut(t *testing.T, key string, body []byte, hash string, token int64, expect bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest("PUT", e.GW+"/"+s3Bucket+"/"+key, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", hash)
	req.Header.Set("Fencing-Token", strconv.FormatInt(token, 10))
	if expect {
		req.Header.Set("Expect", "100-continue")
	}
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: s3WorkerKey, SecretAccessKey: s3WorkerSecret},
		req, hash, "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
