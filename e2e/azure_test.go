package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/fencegate/fencegate/coordinator/client/azblobfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

const (
	azContainer     = "fenced"
	azWorkerAccount = "worker1"
)

// azWorkerKey is the worker's own Shared Key (the route's azure.clients).
var azWorkerKey = base64.StdEncoding.EncodeToString([]byte("worker1-key-0123456789-abcdefghij"))

// azEnv is Azurite with one container and a fencegate in front.
type azEnv struct {
	Az   *testenv.AzuriteServer
	Proc *Proc
	GW   string
}

// azRouteYAML is one Azure route to endpoint (the account's service URL);
// extra lines go into its azure section.
func azRouteYAML(name, host, endpoint, precondition, timeout string, extra ...string) string {
	match := "{path_prefix: /}"
	if host != "" {
		match = fmt.Sprintf("{host: %s, path_prefix: /}", host)
	}
	pre := ""
	if precondition != "" {
		pre = "      precondition: " + precondition + "\n"
	}
	ex := ""
	for _, l := range extra {
		ex += "        " + l + "\n"
	}
	return fmt.Sprintf(`    - name: %s
      match: %s
      azure:
        endpoint: %s
        account_name: %s
        account_key: %s
        clients: [{account_name: %s, account_key: %q}]
        timeout: %s
        stamp: true
%s      resource: "{container}/{blob}"
%s`, name, match, endpoint, testenv.AzuriteAccount, testenv.AzuriteKey, azWorkerAccount, azWorkerKey, timeout, ex, pre)
}

func startAzEnv(t *testing.T, precondition string, extra ...string) *azEnv {
	t.Helper()
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, azContainer)
	p := startFencegate(t, s3GatewayYAML(azRouteYAML("blobs", "", srv.Endpoint, precondition, "30s", extra...)))
	return &azEnv{Az: srv, Proc: p, GW: p.URL("gateway")}
}

// azNoRetry keeps the SDK from retrying what the tests count.
var azNoRetry = policy.RetryOptions{MaxRetries: -1}

// azWorker is azblob pointed at endpoint (the gateway) with the worker's
// own Shared Key, sending token().
func azWorker(t testing.TB, endpoint string, token func() int64) *azblob.Client {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(azWorkerAccount, azWorkerKey)
	if err != nil {
		t.Fatal(err)
	}
	o := azblobfence.ClientOptions(token)
	o.Retry = azNoRetry
	c, err := azblob.NewClientWithSharedKeyCredential(endpoint+"/", cred, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *azEnv) worker(t testing.TB, token *atomic.Int64) *azblob.Client {
	return azWorker(t, e.GW, token.Load)
}

// direct reads the durable state from Azurite itself, never through the
// gateway.
func (e *azEnv) direct(t testing.TB) *azblob.Client { return e.Az.Client(t) }

func azPut(c *azblob.Client, name, body string) error {
	_, err := c.UploadBuffer(context.Background(), azContainer, name, []byte(body), nil)
	return err
}

// azPutBlocks writes body as staged blocks of blockSize and a commit
// (Put Block ×n, Put Block List).
func azPutBlocks(c *azblob.Client, name, body string, blockSize int64) error {
	_, err := c.UploadStream(context.Background(), azContainer, name, strings.NewReader(body),
		&azblob.UploadStreamOptions{BlockSize: blockSize, Concurrency: 2})
	return err
}

// meta returns a metadata value by name whatever case the SDK gives it.
func meta(m map[string]*string, name string) string {
	for k, v := range m {
		if strings.EqualFold(k, name) && v != nil {
			return *v
		}
	}
	return ""
}

// stored returns the blob's content and stamp read from Azurite, or
// "<absent>".
func (e *azEnv) stored(t *testing.T, name string) (body, stamp string) {
	t.Helper()
	bc := e.direct(t).ServiceClient().NewContainerClient(azContainer).NewBlobClient(name)
	props, err := bc.GetProperties(context.Background(), nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return "<absent>", ""
	}
	if err != nil {
		t.Fatalf("properties of %s: %v", name, err)
	}
	r, err := bc.DownloadStream(context.Background(), nil)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), meta(props.Metadata, "fencing_token")
}

// props returns the blob's ETag and metadata as Azurite holds them.
func (e *azEnv) props(t *testing.T, name string) (azcore.ETag, map[string]*string) {
	t.Helper()
	p, err := e.direct(t).ServiceClient().NewContainerClient(azContainer).NewBlobClient(name).GetProperties(context.Background(), nil)
	if err != nil {
		t.Fatalf("properties of %s: %v", name, err)
	}
	return *p.ETag, p.Metadata
}

func wantAzStale(t *testing.T, what string, err error) {
	t.Helper()
	se, ok := azblobfence.Stale(err)
	if !ok {
		t.Fatalf("%s: err = %v; want stale_fencing_token", what, err)
	}
	if se.Highest == 0 || se.Token >= se.Highest {
		t.Fatalf("%s: stale refusal %+v names no newer token", what, se)
	}
}

func to[T any](v T) *T { return &v }

// Put Block List is the effect of a block upload: A (41) stages blocks,
// B (42) writes the blob, and A's commit of its staged blocks is refused:
// they are never committed after B's write. A block staged by A after B's
// write is refused too; B's own staged upload then commits whole.
func TestAzureBlockListSuperseded(t *testing.T) {
	e := startAzEnv(t, "")
	ctx := context.Background()
	a := e.worker(t, tokenOf(41)).ServiceClient().NewContainerClient(azContainer).NewBlockBlobClient("big")
	b := e.worker(t, tokenOf(42)).ServiceClient().NewContainerClient(azContainer).NewBlockBlobClient("big")
	id := func(i int) string { return base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("blk-%04d", i))) }
	for i := 0; i < 2; i++ {
		if _, err := a.StageBlock(ctx, id(i), streaming.NopCloser(strings.NewReader(fmt.Sprintf("A%d", i))), nil); err != nil {
			t.Fatalf("A stages block %d: %v", i, err)
		}
	}
	if _, err := b.Upload(ctx, streaming.NopCloser(strings.NewReader("B")), nil); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	_, err := a.CommitBlockList(ctx, []string{id(0), id(1)}, nil)
	wantAzStale(t, "A's commit of blocks staged before B's write", err)
	_, err = a.StageBlock(ctx, id(2), streaming.NopCloser(strings.NewReader("A2")), nil)
	wantAzStale(t, "A's staging after B's write", err)
	if got, stamp := e.stored(t, "big"); got != "B" || stamp != "42" {
		t.Fatalf("stored %q stamp %q; want B stamped 42", got, stamp)
	}
	// B stages and commits blocks of its own.
	for i := 3; i < 5; i++ {
		if _, err := b.StageBlock(ctx, id(i), streaming.NopCloser(strings.NewReader(fmt.Sprintf("B%d", i))), nil); err != nil {
			t.Fatalf("B stages block %d: %v", i, err)
		}
	}
	if _, err := b.CommitBlockList(ctx, []string{id(3), id(4)}, nil); err != nil {
		t.Fatalf("B's commit: %v", err)
	}
	if got, stamp := e.stored(t, "big"); got != "B3B4" || stamp != "42" {
		t.Fatalf("stored %q stamp %q; want B3B4 stamped 42", got, stamp)
	}
}

// Refusals are in the Blob service's XML error format, which azblob reads
// into an azcore.ResponseError whose ErrorCode is fencegate's code.
func TestAzureRefusalFormat(t *testing.T) {
	e := startAzEnv(t, "")
	if err := azPut(e.worker(t, tokenOf(42)), "r", "B"); err != nil {
		t.Fatal(err)
	}
	err := azPut(e.worker(t, tokenOf(41)), "r", "A")
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusConflict || re.ErrorCode != "stale_fencing_token" {
		t.Fatalf("err = %#v; want an azcore.ResponseError 409 with code stale_fencing_token", err)
	}
	se, _ := azblobfence.Stale(err)
	if se == nil || se.Resource != azContainer+"/r" || se.Token != 41 || se.Highest != 42 || se.Route != "blobs" {
		t.Fatalf("stale error %+v; want resource %s/r, token 41, highest 42, route blobs", se, azContainer)
	}
	// A missing token, in the same format.
	err = azPut(e.worker(t, tokenOf(0)), "r", "none")
	if !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionRequired || re.ErrorCode != "missing_fencing_token" {
		t.Fatalf("no token: %v; want 428 missing_fencing_token", err)
	}
	// Writes the gateway cannot name the blobs of: a batch, an account
	// write.
	ctx := context.Background()
	w := e.worker(t, tokenOf(50))
	bb, err := w.ServiceClient().NewContainerClient(azContainer).NewBatchBuilder()
	if err != nil {
		t.Fatal(err)
	}
	if err := bb.Delete("r", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ServiceClient().NewContainerClient(azContainer).SubmitBatch(ctx, bb, nil); !errors.As(err, &re) || re.StatusCode != http.StatusNotImplemented {
		t.Fatalf("batch: %v; want 501", err)
	}
	if got, _ := e.stored(t, "r"); got != "B" {
		t.Fatalf("stored %q; want B", got)
	}
}

// Workers hold no write path around the fence: a request signed with the
// store account's key, with a wrong worker key, without credentials, or a
// worker's signed request replayed on another blob is refused, and the
// blob in Azurite is unchanged. The gateway signs its forwards itself.
func TestAzureCredentialIsolation(t *testing.T) {
	e := startAzEnv(t, "")
	if err := azPut(e.worker(t, tokenOf(42)), "iso", "B"); err != nil {
		t.Fatal(err)
	}
	o := azblobfence.ClientOptions(azblobfence.Fixed(43))
	o.Retry = azNoRetry
	storeCred, _ := azblob.NewSharedKeyCredential(testenv.AzuriteAccount, testenv.AzuriteKey)
	withStoreKey, _ := azblob.NewClientWithSharedKeyCredential(e.GW+"/", storeCred, o)
	wrongCred, _ := azblob.NewSharedKeyCredential(azWorkerAccount, base64.StdEncoding.EncodeToString([]byte("not the worker's key")))
	wrongKey, _ := azblob.NewClientWithSharedKeyCredential(e.GW+"/", wrongCred, o)
	anonymous, _ := azblob.NewClientWithNoCredential(e.GW+"/", o)
	for name, c := range map[string]*azblob.Client{"store account's key": withStoreKey, "wrong worker key": wrongKey, "no credentials": anonymous} {
		err := azPut(c, "iso", "X")
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden || re.ErrorCode != "forbidden" {
			t.Errorf("%s: %v; want 403 forbidden", name, err)
		}
		if strings.Contains(fmt.Sprint(err), testenv.AzuriteKey) || strings.Contains(fmt.Sprint(err), azWorkerKey) {
			t.Errorf("%s: the refusal names a key: %v", name, err)
		}
		// Reads need the worker's credentials too.
		if _, err := c.DownloadStream(context.Background(), azContainer, "iso", nil); !errors.As(err, &re) || re.StatusCode != http.StatusForbidden {
			t.Errorf("%s: read: %v; want 403", name, err)
		}
	}
	// A signed request replayed on another blob: the signature covers the
	// path.
	var captured *http.Request
	var body []byte
	cred, _ := azblob.NewSharedKeyCredential(azWorkerAccount, azWorkerKey)
	co := azblobfence.ClientOptions(azblobfence.Fixed(43))
	co.Retry = azNoRetry
	co.Transport = transporterFunc(func(r *http.Request) (*http.Response, error) {
		captured = r.Clone(context.Background())
		body, _ = io.ReadAll(r.Body)
		return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	cc, _ := azblob.NewClientWithSharedKeyCredential(e.GW+"/", cred, co)
	if err := azPut(cc, "other", "X"); err != nil {
		t.Fatal(err)
	}
	captured.URL.Path = "/" + azContainer + "/iso"
	captured.URL.RawPath = ""
	captured.RequestURI = ""
	captured.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(captured)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "<Code>forbidden</Code>") {
		t.Fatalf("replayed on another blob: %s %s; want 403 forbidden", resp.Status, b)
	}
	// The same request on its own path is the worker's: admitted.
	captured.URL.Path = "/" + azContainer + "/other"
	captured.Body = io.NopCloser(bytes.NewReader(body))
	if resp, err = http.DefaultClient.Do(captured); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the signed request on its own path: %s; want 201", resp.Status)
	}
	if got, stamp := e.stored(t, "iso"); got != "B" || stamp != "42" {
		t.Fatalf("stored %q stamp %q; want B stamped 42", got, stamp)
	}
}

type transporterFunc func(*http.Request) (*http.Response, error)

func (f transporterFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }
