package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// PutObject of a small and a 100 MiB+ object through the gateway; the
// gateway's peak RSS stays far below the object size (bodies stream).
func TestS3LargePutStreams(t *testing.T) {
	e := startS3Env(t, "etag")
	w := e.worker(tokenOf(1))
	if err := putObject(t, w, "small", "tiny"); err != nil {
		t.Fatal(err)
	}
	base := vmHWM(t, e.Proc)
	const size = 112 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	_, err := w.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("large"),
		Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("large put: %v", err)
	}
	peak := vmHWM(t, e.Proc)
	t.Logf("gateway peak RSS: %d MiB after a small put, %d MiB after a %d MiB put", base>>20, peak>>20, size>>20)
	if peak-base > 48<<20 {
		t.Errorf("gateway peak RSS grew by %d MiB for a %d MiB object: the body is buffered", (peak-base)>>20, size>>20)
	}
	head, err := e.direct().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String("large")})
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	if aws.ToInt64(head.ContentLength) != size || strings.Trim(aws.ToString(head.ETag), `"`) != hex.EncodeToString(sum[:]) {
		t.Fatalf("stored object: %d bytes, ETag %s; want %d bytes, md5 %x", aws.ToInt64(head.ContentLength), aws.ToString(head.ETag), size, sum)
	}
}

// vmHWM is the peak resident set size of the fencegate process.
func vmHWM(t *testing.T, p *Proc) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
