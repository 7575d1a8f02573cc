package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"google.golang.org/api/googleapi"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// osDialects are the stores the object-store contract runs against, each
// through its official client: VersityGW (S3), fake-gcs-server (GCS),
// Azurite (Azure).
var osDialects = []osDialect{osS3, osGCS, osAzure}

var (
	osS3 = osDialect{
		name: "s3", precondition: "etag", bucketFlag: "--bucket", start: startS3Contract, storeRefusesWorker: true,
		status: func(err error) (int, string) {
			var ae smithy.APIError
			var re *awshttp.ResponseError
			if !errors.As(err, &ae) || !errors.As(err, &re) {
				return 0, ""
			}
			return re.HTTPStatusCode(), ae.ErrorCode()
		},
		ignoring: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
		},
	}
	osGCS = osDialect{
		name: "gcs", precondition: "generation", bucketFlag: "--bucket", start: startGCSContract, unreadProbe: true,
		status: func(err error) (int, string) {
			var ge *googleapi.Error
			if !errors.As(err, &ge) || len(ge.Errors) != 1 {
				return 0, ""
			}
			return ge.Code, ge.Errors[0].Reason
		},
		ignoring: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if r.Method == http.MethodGet {
				w.Write([]byte(`{"generation":"7"}`))
				return
			}
			w.Write([]byte(`{"name":".fencegate-probe","generation":"7"}`))
		},
	}
	osAzure = osDialect{
		name: "azure", precondition: "etag", bucketFlag: "--container", start: startAzureContract, unreadProbe: true, storeRefusesWorker: true,
		status: func(err error) (int, string) {
			var re *azcore.ResponseError
			if !errors.As(err, &re) {
				return 0, ""
			}
			return re.StatusCode, re.ErrorCode
		},
		ignoring: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("ETag", `"0x8D0000000000001"`)
			switch r.Method {
			case http.MethodPut:
				w.WriteHeader(http.StatusCreated)
			case http.MethodDelete:
				w.WriteHeader(http.StatusAccepted)
			}
		},
	}
)

// lowerKeys is a store's metadata with names lower-cased (stores and
// clients disagree on case).
func lowerKeys[V any](m map[string]V, val func(V) string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToLower(k)] = val(v)
	}
	return out
}

func startS3Contract(t *testing.T) *osStore {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, osBucket)
	client := func(c *s3.Client, stampKey string) osClient {
		ctx := context.Background()
		b := aws.String(osBucket)
		putMeta := func(key, body string, meta map[string]string) error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String(key), Body: strings.NewReader(body), Metadata: meta})
			return err
		}
		return osClient{
			put:      func(key, body string) error { return putMeta(key, body, nil) },
			putStamp: func(key, body, stamp string) error { return putMeta(key, body, map[string]string{stampKey: stamp}) },
			get: func(key string) (string, error) {
				out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String(key)})
				if err != nil {
					return "", err
				}
				defer out.Body.Close()
				got, err := io.ReadAll(out.Body)
				return string(got), err
			},
			writes: []osWrite{
				{name: "PutObject", body: "stale", do: func(key, _ string) error { return putMeta(key, "stale", nil) }},
				{name: "CopyObject", body: "old-src", do: func(key, src string) error {
					_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: aws.String(key), CopySource: aws.String(osBucket + "/" + src)})
					return err
				}},
				{name: "CreateMultipartUpload", do: func(key, _ string) error {
					_, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: b, Key: aws.String(key)})
					return err
				}},
				{name: "DeleteObject", gone: true, do: func(key, _ string) error {
					_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: b, Key: aws.String(key)})
					return err
				}},
				// Last: it deletes src too.
				{name: "DeleteObjects", gone: true, do: func(key, src string) error {
					_, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: b, Delete: &types.Delete{
						Objects: []types.ObjectIdentifier{{Key: aws.String(key)}, {Key: aws.String(src)}}}})
					return err
				}},
			},
			large: map[string]func(string, []byte) error{
				"PutObject": func(key string, data []byte) error {
					_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String(key), Body: bytes.NewReader(data)})
					return err
				},
			},
		}
	}
	direct := s3Worker(srv.Endpoint, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))
	return &osStore{
		endpoint: srv.Endpoint,
		route: func(name, host, endpoint, precondition, timeout string) string {
			return strings.Replace(s3RouteYAML(name, host, endpoint, srv, precondition, timeout),
				"        timeout: "+timeout+"\n", "        timeout: "+timeout+"\n        stamp: true\n", 1)
		},
		worker: func(t *testing.T, gw string, token int64) osClient {
			return client(s3Worker(gw, s3WorkerKey, s3WorkerSecret, awsfence.Fixed(token)), "fencing-token")
		},
		direct: client(direct, "fencing-token"),
		read: func(t *testing.T, key string) osObject {
			t.Helper()
			out, err := direct.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(osBucket), Key: aws.String(key)})
			var nsk *types.NoSuchKey
			if errors.As(err, &nsk) {
				return osAbsent
			}
			if err != nil {
				t.Fatalf("direct GetObject %s: %v", key, err)
			}
			defer out.Body.Close()
			return readObject(t, out.Body, lowerKeys(out.Metadata, func(v string) string { return v }), "fencing-token", aws.ToString(out.ETag))
		},
	}
}

func startGCSContract(t *testing.T) *osStore {
	srv := testenv.FakeGCS(t)
	srv.CreateBucket(t, osBucket)
	client := func(c *storage.Client) osClient {
		ctx := context.Background()
		obj := func(key string) *storage.ObjectHandle { return c.Bucket(osBucket).Object(key) }
		upload := func(key string, body io.Reader, chunk int, meta map[string]string) error {
			w := obj(key).NewWriter(ctx)
			w.ChunkSize, w.Metadata = chunk, meta
			if _, err := io.Copy(w, body); err != nil {
				w.Close()
				return err
			}
			return w.Close()
		}
		return osClient{
			put: func(key, body string) error { return upload(key, strings.NewReader(body), 0, nil) },
			putStamp: func(key, body, stamp string) error {
				return upload(key, strings.NewReader(body), 0, map[string]string{"fencing-token": stamp})
			},
			get: func(key string) (string, error) {
				r, err := obj(key).NewReader(ctx)
				if err != nil {
					return "", err
				}
				defer r.Close()
				got, err := io.ReadAll(r)
				return string(got), err
			},
			writes: []osWrite{
				{name: "multipart upload", body: "A-multipart", do: func(key, _ string) error { return upload(key, strings.NewReader("A-multipart"), 0, nil) }},
				{name: "resumable upload", do: func(key, _ string) error {
					return upload(key, strings.NewReader(strings.Repeat("A", 300<<10)), 256<<10, nil)
				}},
				{name: "compose", do: func(key, src string) error { _, err := obj(key).ComposerFrom(obj(src)).Run(ctx); return err }},
				{name: "copy", body: "old-src", do: func(key, src string) error { _, err := obj(key).CopierFrom(obj(src)).Run(ctx); return err }},
				{name: "rewrite with metadata", do: func(key, src string) error {
					cp := obj(key).CopierFrom(obj(src))
					cp.ContentType = "text/plain"
					_, err := cp.Run(ctx)
					return err
				}},
				{name: "metadata update", owner: "A", do: func(key, _ string) error {
					_, err := obj(key).Update(ctx, storage.ObjectAttrsToUpdate{Metadata: map[string]string{"owner": "A"}})
					return err
				}},
				{name: "acl change", do: func(key, _ string) error { return obj(key).ACL().Set(ctx, storage.AllUsers, storage.RoleReader) }},
				{name: "delete", gone: true, do: func(key, _ string) error { return obj(key).Delete(ctx) }},
			},
			large: map[string]func(string, []byte) error{
				"multipart": func(key string, data []byte) error { return upload(key, bytes.NewReader(data), 0, nil) },
				"resumable": func(key string, data []byte) error { return upload(key, bytes.NewReader(data), 16<<20, nil) },
			},
		}
	}
	direct := gcsDirect(t, srv.Endpoint)
	return &osStore{
		endpoint: srv.Endpoint,
		route: func(name, host, endpoint, precondition, timeout string) string {
			return gcsRouteYAML(name, host, endpoint, precondition, timeout)
		},
		worker: func(t *testing.T, gw string, token int64) osClient {
			return client(gcsWorker(t, gw, func() int64 { return token }))
		},
		direct: client(direct),
		read: func(t *testing.T, key string) osObject {
			t.Helper()
			o := direct.Bucket(osBucket).Object(key)
			attrs, err := o.Attrs(context.Background())
			if errors.Is(err, storage.ErrObjectNotExist) {
				return osAbsent
			}
			if err != nil {
				t.Fatalf("attrs of %s: %v", key, err)
			}
			r, err := o.Generation(attrs.Generation).NewReader(context.Background())
			if err != nil {
				t.Fatalf("read %s: %v", key, err)
			}
			defer r.Close()
			return readObject(t, r, lowerKeys(attrs.Metadata, func(v string) string { return v }), "fencing-token", strconv.FormatInt(attrs.Generation, 10))
		},
	}
}

func startAzureContract(t *testing.T) *osStore {
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, osBucket)
	client := func(c *azblob.Client, stampKey string) osClient {
		ctx := context.Background()
		cc := c.ServiceClient().NewContainerClient(osBucket)
		bb := cc.NewBlockBlobClient
		putMeta := func(key, body string, meta map[string]*string) error {
			_, err := c.UploadBuffer(ctx, osBucket, key, []byte(body), &azblob.UploadBufferOptions{Metadata: meta})
			return err
		}
		blockID := base64.StdEncoding.EncodeToString([]byte("block-0000"))
		return osClient{
			put:      func(key, body string) error { return putMeta(key, body, nil) },
			putStamp: func(key, body, stamp string) error { return putMeta(key, body, map[string]*string{stampKey: &stamp}) },
			get: func(key string) (string, error) {
				r, err := c.DownloadStream(ctx, osBucket, key, nil)
				if err != nil {
					return "", err
				}
				defer r.Body.Close()
				got, err := io.ReadAll(r.Body)
				return string(got), err
			},
			writes: []osWrite{
				{name: "put blob", body: "A-put", do: func(key, _ string) error { return putMeta(key, "A-put", nil) }},
				{name: "blocks and commit", do: func(key, _ string) error {
					_, err := c.UploadStream(ctx, osBucket, key, strings.NewReader(strings.Repeat("A", 3<<10)),
						&azblob.UploadStreamOptions{BlockSize: 1 << 10, Concurrency: 2})
					return err
				}},
				{name: "put block", do: func(key, _ string) error {
					_, err := bb(key).StageBlock(ctx, blockID, streaming.NopCloser(strings.NewReader("A-block")), nil)
					return err
				}},
				// A commit of the block staged just above; with the current
				// token TestAzureBlockListSuperseded commits blocks.
				{name: "put block list", staleOnly: true, do: func(key, _ string) error {
					_, err := bb(key).CommitBlockList(ctx, []string{blockID}, nil)
					return err
				}},
				{name: "copy blob", do: func(key, src string) error {
					_, err := bb(key).StartCopyFromURL(ctx, cc.NewBlobClient(src).URL(), nil)
					return err
				}},
				{name: "sync copy", body: "old-src", do: func(key, src string) error {
					_, err := bb(key).CopyFromURL(ctx, cc.NewBlobClient(src).URL(), nil)
					return err
				}},
				// Azurite answers it 501 Not Implemented: only its refusal
				// is checked.
				{name: "put blob from url", staleOnly: true, do: func(key, src string) error {
					_, err := bb(key).UploadBlobFromURL(ctx, cc.NewBlobClient(src).URL(), nil)
					return err
				}},
				{name: "set metadata", owner: "A", do: func(key, _ string) error {
					_, err := bb(key).SetMetadata(ctx, map[string]*string{"owner": to("A")}, nil)
					return err
				}},
				{name: "set properties", do: func(key, _ string) error {
					_, err := bb(key).SetHTTPHeaders(ctx, blob.HTTPHeaders{BlobContentType: to("text/a")}, nil)
					return err
				}},
				{name: "set tags", do: func(key, _ string) error {
					_, err := bb(key).SetTags(ctx, map[string]string{"owner": "A"}, nil)
					return err
				}},
				{name: "snapshot", do: func(key, _ string) error { _, err := bb(key).CreateSnapshot(ctx, nil); return err }},
				{name: "delete", gone: true, do: func(key, _ string) error {
					// With the snapshots: "snapshot" above made one.
					_, err := bb(key).Delete(ctx, &blob.DeleteOptions{DeleteSnapshots: to(blob.DeleteSnapshotsOptionTypeInclude)})
					return err
				}},
			},
			large: map[string]func(string, []byte) error{
				"put blob": func(key string, data []byte) error {
					_, err := bb(key).Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), nil)
					return err
				},
				"blocks": func(key string, data []byte) error {
					_, err := c.UploadStream(ctx, osBucket, key, bytes.NewReader(data), &azblob.UploadStreamOptions{BlockSize: 16 << 20, Concurrency: 1})
					return err
				},
			},
		}
	}
	direct := srv.Client(t)
	return &osStore{
		endpoint: srv.Endpoint,
		route: func(name, host, endpoint, precondition, timeout string) string {
			return azRouteYAML(name, host, endpoint, precondition, timeout)
		},
		worker: func(t *testing.T, gw string, token int64) osClient {
			return client(azWorker(t, gw, func() int64 { return token }), "fencing_token")
		},
		// Around the gateway, the stamp's name in another case: the
		// rebuild reads metadata names as the store does.
		direct: client(direct, "Fencing_Token"),
		read: func(t *testing.T, key string) osObject {
			t.Helper()
			bc := direct.ServiceClient().NewContainerClient(osBucket).NewBlobClient(key)
			props, err := bc.GetProperties(context.Background(), nil)
			var re *azcore.ResponseError
			if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
				return osAbsent
			}
			if err != nil {
				t.Fatalf("properties of %s: %v", key, err)
			}
			r, err := bc.DownloadStream(context.Background(), &blob.DownloadStreamOptions{
				AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag}}})
			if err != nil {
				t.Fatalf("read %s: %v", key, err)
			}
			defer r.Body.Close()
			return readObject(t, r.Body, lowerKeys(props.Metadata, func(v *string) string { return aws.ToString(v) }), "fencing_token", string(*props.ETag))
		},
	}
}
