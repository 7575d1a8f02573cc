package e2e

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/internal/testenv"
)

// DeleteObjects, the S3 body that names the objects it deletes, in every
// framing of the table, against VersityGW: the victim, fenced at 100, is
// never deleted and its fence never moves (bodyattack_framing_test.go).
func TestBodyAttackS3DeleteObjectsFramings(t *testing.T) {
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
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: s3WorkerKey, SecretAccessKey: s3WorkerSecret},
		req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}
