package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Virtual-hosted requests (bucket.s3.internal/key, aws-sdk-go-v2 with
// UsePathStyle false): the worker signs the virtual host, the gateway
// verifies that signature, fences {bucket}/{key} exactly as for the
// path-style spelling of the same object, and forwards path-style to S3.
// A stale PutObject is refused and nothing lands; a current one lands.
func TestS3VirtualHosted(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	route := strings.Replace(s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s"),
		"        timeout: 30s\n", "        timeout: 30s\n        virtual_host_suffix: s3.internal\n", 1)
	p := startFencegate(t, s3GatewayYAML(route))
	e := &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}
	gwAddr := strings.TrimPrefix(e.GW, "http://")
	_, port, _ := net.SplitHostPort(gwAddr)

	// The SDK resolves BaseEndpoint http://s3.internal:PORT to
	// http://fenced.s3.internal:PORT/key; every host is dialled at the
	// gateway, so the Host header (and the signature) keep the virtual host.
	dial := (&net.Dialer{}).DialContext
	vhost := func(token int64) *s3.Client {
		return s3.New(s3.Options{
			Region:       "us-east-1",
			BaseEndpoint: aws.String("http://s3.internal:" + port),
			UsePathStyle: false,
			Credentials:  credentials.NewStaticCredentialsProvider(s3WorkerKey, s3WorkerSecret, ""),
			HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
				tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
					return dial(ctx, network, gwAddr)
				}
			}),
			RetryMaxAttempts: 1,
		}, awsfence.WithToken(awsfence.Fixed(token)))
	}
	var hosts []string
	logHost := func(c *s3.Client) *s3.Client {
		return s3.New(c.Options(), func(o *s3.Options) {
			o.HTTPClient = hostRecorder{o.HTTPClient, &hosts}
		})
	}

	if err := putObject(t, logHost(vhost(2)), "jobs/7/out.csv", "current"); err != nil {
		t.Fatalf("current PutObject, virtual-hosted: %v", err)
	}
	if len(hosts) != 1 || !strings.HasPrefix(hosts[0], s3Bucket+".s3.internal:") {
		t.Fatalf("request hosts %v; want the virtual host %s.s3.internal", hosts, s3Bucket)
	}
	wantRefusal(t, putObject(t, vhost(1), "jobs/7/out.csv", "stale"), "stale_fencing_token", http.StatusConflict)
	// The path-style spelling of the same object shares its fence.
	wantRefusal(t, putObject(t, e.worker(tokenOf(1)), "jobs/7/out.csv", "stale-path"), "stale_fencing_token", http.StatusConflict)
	if got := e.objectBody(t, "jobs/7/out.csv"); got != "current" {
		t.Fatalf("object at S3 = %q; want the current owner's", got)
	}

	// Reads and listing through the virtual host.
	out, err := vhost(0).GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("jobs/7/out.csv")})
	if err != nil {
		t.Fatalf("GetObject, virtual-hosted: %v", err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "current" {
		t.Fatalf("GetObject, virtual-hosted = %q", b)
	}
	list, err := vhost(0).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(s3Bucket)})
	if err != nil || len(list.Contents) != 1 || aws.ToString(list.Contents[0].Key) != "jobs/7/out.csv" {
		t.Fatalf("ListObjectsV2, virtual-hosted: %+v %v", list, err)
	}
	// A newer owner through the virtual host, then the previous one is stale.
	if err := putObject(t, vhost(3), "jobs/7/out.csv", "newer"); err != nil {
		t.Fatalf("newer PutObject: %v", err)
	}
	wantRefusal(t, putObject(t, vhost(2), "jobs/7/out.csv", "late"), "stale_fencing_token", http.StatusConflict)
	if got := e.objectBody(t, "jobs/7/out.csv"); got != "newer" {
		t.Fatalf("object at S3 = %q; want the newer owner's", got)
	}
}

// hostRecorder notes the Host of every request the SDK sends.
type hostRecorder struct {
	next  s3.HTTPClient
	hosts *[]string
}

func (h hostRecorder) Do(r *http.Request) (*http.Response, error) {
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	*h.hosts = append(*h.hosts, host)
	return h.next.Do(r)
}
