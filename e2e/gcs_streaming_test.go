package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"io"
	"testing"
)

// Large uploads through the gateway, as one multipart request (the stamp
// spliced into its metadata part) and as a resumable session in 16 MiB
// chunks: the gateway's peak RSS stays far below the object size (bodies
// stream), and the stored objects are whole.
func TestGCSLargeUploadStreams(t *testing.T) {
	e := startGCSEnv(t, "generation")
	w := e.worker(t, tokenOf(1))
	if err := gcsPut(w, "small", "tiny", 0); err != nil {
		t.Fatal(err)
	}
	base := vmHWM(t, e.Proc)
	const size = 64 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	sum := md5.Sum(data)
	for _, tc := range []struct {
		name      string
		chunkSize int
	}{{"multipart", 0}, {"resumable", 16 << 20}} {
		ow := w.Bucket(gcsBucket).Object("large-" + tc.name).NewWriter(context.Background())
		ow.ChunkSize = tc.chunkSize
		if _, err := io.Copy(ow, bytes.NewReader(data)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := ow.Close(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		attrs, err := e.direct(t).Bucket(gcsBucket).Object("large-" + tc.name).Attrs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if attrs.Size != size || !bytes.Equal(attrs.MD5, sum[:]) || attrs.Metadata["fencing-token"] != "1" {
			t.Fatalf("%s: stored %d bytes, md5 %x, metadata %v; want %d bytes, md5 %x, stamp 1", tc.name, attrs.Size, attrs.MD5, attrs.Metadata, size, sum)
		}
	}
	peak := vmHWM(t, e.Proc)
	t.Logf("gateway peak RSS: %d MiB after a small upload, %d MiB after two %d MiB uploads", base>>20, peak>>20, size>>20)
	if peak-base > 40<<20 {
		t.Errorf("gateway peak RSS grew by %d MiB for %d MiB objects: the body is buffered", (peak-base)>>20, size>>20)
	}
}
