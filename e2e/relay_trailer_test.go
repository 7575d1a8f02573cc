package e2e

import (
	"bufio"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
)

// A trailer arrives after the gateway decided on a request, and the
// gateway checks only those a request announces; VersityGW merges every
// trailer into the request's headers. A DeleteObjects body, read whole
// before the forward, has filled the request's trailers, unannounced ones
// included: before, they went upstream, and an unsigned, unannounced
// x-amz-expected-bucket-owner trailer decided the store's answer (403,
// nothing deleted). No trailer value is relayed now: the delete is made
// as the checked request says. The object is read from VersityGW.
func TestS3UnannouncedTrailerNotRelayed(t *testing.T) {
	srv, p := startS3Stamping(t)
	gw, _ := url.Parse(p.URL("gateway"))
	direct := s3Worker(srv.Endpoint, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))
	if _, err := direct.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(osBucket), Key: aws.String("k"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	body := `<Delete><Object><Key>k</Key></Object></Delete>`
	sum, md := sha256.Sum256([]byte(body)), md5.Sum([]byte(body))
	req, _ := http.NewRequest(http.MethodPost, gw.String()+"/"+osBucket+"?delete=", nil)
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req.Header.Set("Content-Md5", base64.StdEncoding.EncodeToString(md[:]))
	req.Header.Set("Fencing-Token", "5")
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: s3WorkerKey, SecretAccessKey: s3WorkerSecret},
		req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", gw.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var raw strings.Builder
	fmt.Fprintf(&raw, "POST /%s?delete= HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n", osBucket, gw.Host)
	req.Header.Write(&raw)
	fmt.Fprintf(&raw, "\r\n%x\r\n%s\r\n0\r\nX-Amz-Expected-Bucket-Owner: 000000000000\r\n\r\n", len(body), body)
	io.WriteString(c, raw.String())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, err = direct.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(osBucket), Key: aws.String("k")})
	var nf *types.NotFound
	if resp.StatusCode != http.StatusOK || !errors.As(err, &nf) {
		t.Fatalf("DeleteObjects with an unannounced trailer: %d %s; the object after it: %v; want 200 and the object deleted", resp.StatusCode, b, err)
	}
}
