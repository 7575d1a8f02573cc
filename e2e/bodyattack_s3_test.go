package e2e

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/internal/testenv"
)

// DeleteObjects, the S3 body that names the objects it deletes, encoded
// or spelled as another reader might read it (s3BodyAttacks) and in every
// framing of the table (bodyattack_framing_test.go), against VersityGW:
// the victim, fenced at 100, is never deleted and its fence never moves
// but by the table's control.
func TestBodyAttackS3(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	p := startFencegate(t, s3GatewayYAML(s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s")+
		fmt.Sprintf("      max_body_bytes: %d\n", bodyLimit)))
	e := &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}
	const high = 100
	for _, k := range []string{"victim", "bystander"} {
		if err := putObject(t, e.worker(tokenOf(high)), k, k+" body"); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("bodies", func(t *testing.T) {
		s3BodyAttacks(t, e, func() int64 { return fenceHighest(t, p.URL("admin"), s3Bucket+"/victim") }, srv.Dir)
	})
	runFramings(t, bodyStore{
		gw: e.GW,
		request: func(t *testing.T, token int64, body []byte) *http.Request {
			return s3DeleteObjectsRequest(t, e.GW, token, body, nil)
		},
		body: func(n int) []byte {
			const open, close = "<Delete><Object><Key>victim</Key></Object>", "</Delete>"
			return []byte(open + strings.Repeat(" ", max(n-len(open)-len(close), 0)) + close)
		},
		state: func(t *testing.T) []string { return versityState(t, srv.Dir) },
		fence: func(t *testing.T) int64 { return fenceHighest(t, p.URL("admin"), s3Bucket+"/victim") },
		high:  high,
	})
}

// s3DeleteObjectsRequest is a DeleteObjects of body signed with the
// worker's key, payload hash and Content-MD5 of body, and no length
// signed (the framing sets it); hdr are extra headers, signed.
func s3DeleteObjectsRequest(t *testing.T, gw string, token int64, body []byte, hdr map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, gw+"/"+s3Bucket+"?delete=", io.MultiReader())
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 0
	sum, md := sha256.Sum256(body), md5.Sum(body)
	req.Header.Set("Content-Type", "application/xml")
	req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(md[:]))
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req.Header.Set("Fencing-Token", fmt.Sprint(token))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	// The payload hash signed is the header's (a STREAMING-* value, where
	// a row sets one).
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: s3WorkerKey, SecretAccessKey: s3WorkerSecret},
		req, req.Header.Get("X-Amz-Content-Sha256"), "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}

// s3BodyAttacks sends DeleteObjects bodies naming the victim that a store
// could read otherwise than the gateway's strict parser: encoded (gzip,
// deflate: VersityGW reads the raw body, a store that inflates would not),
// in aws-chunked framing announced only by the payload hash, in another
// character set, after a byte-order mark. Each must be refused with the
// store unchanged, with a stale token and a fresh one, before the fence
// (the gateway's parser refuses what it cannot read one way); the
// control, the plain body with the stale token, is refused by the fence.
func s3BodyAttacks(t *testing.T, e *s3Env, fence func() int64, root string) {
	const doc = "<Delete><Object><Key>victim</Key></Object></Delete>"
	deflated := func(gz bool) []byte {
		var b bytes.Buffer
		var w io.WriteCloser
		if gz {
			w = gzip.NewWriter(&b)
		} else {
			w, _ = flate.NewWriter(&b, flate.BestSpeed)
		}
		io.WriteString(w, doc)
		w.Close()
		return b.Bytes()
	}
	utf16 := []byte{0xff, 0xfe}
	for _, r := range `<?xml version="1.0" encoding="UTF-16"?>` + doc {
		utf16 = append(utf16, byte(r), 0)
	}
	awsChunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(doc), doc)
	streaming := map[string]string{"X-Amz-Content-Sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "X-Amz-Decoded-Content-Length": fmt.Sprint(len(doc))}
	for _, tc := range []struct {
		name string
		body []byte
		hdr  map[string]string
		// want is the status wanted with the stale token (0: any
		// refusal).
		want int
	}{
		{name: "plain (the control: the victim is fenced)", body: []byte(doc), want: http.StatusConflict},
		{name: "gzip", body: deflated(true), hdr: map[string]string{"Content-Encoding": "gzip"}},
		{name: "deflate", body: deflated(false), hdr: map[string]string{"Content-Encoding": "deflate"}},
		{name: "aws-chunked, announced by the payload hash only", body: []byte(awsChunked), hdr: streaming},
		{name: "aws-chunked and gzip", body: []byte(awsChunked),
			hdr: map[string]string{"Content-Encoding": "aws-chunked,gzip", "X-Amz-Content-Sha256": streaming["X-Amz-Content-Sha256"], "X-Amz-Decoded-Content-Length": fmt.Sprint(len(doc))}},
		{name: "UTF-16", body: utf16},
		{name: "byte-order mark", body: append([]byte("\xef\xbb\xbf"), doc...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, high := versityState(t, root), fence()
			tokens := []int64{high - 1}
			if tc.want == 0 {
				tokens = append(tokens, high+1)
			}
			for _, token := range tokens {
				req := s3DeleteObjectsRequest(t, e.GW, token, tc.body, tc.hdr)
				req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(tc.body)), int64(len(tc.body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 400 || tc.want != 0 && resp.StatusCode != tc.want {
					t.Errorf("token %d: %d %.300s; want a refusal (%d)", token, resp.StatusCode, b, tc.want)
				}
				if after := versityState(t, root); !slices.Equal(before, after) {
					t.Errorf("token %d: the store changed (answer %d %.300s):\n%s", token, resp.StatusCode, b, stateDiff(before, after))
				}
			}
			if h := fence(); h != high {
				t.Errorf("the victim's fence is %d; want %d", h, high)
			}
		})
	}
}
