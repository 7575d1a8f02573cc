package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
)

// azblob sorts the signed x-ms-* headers in the service's weighted order,
// not by bytes: metadata names such as a_b, a1 and aB come in another
// order than sort.Strings gives. Such a worker's Put
// Blob, Put Block List and Set Blob Metadata are accepted by the gateway,
// forwarded signed in the order Azurite verifies, and stored with every
// name, beside the stamp.
func TestAzureSharedKeyHeaderOrder(t *testing.T) {
	e := startAzEnv(t, "etag")
	w := e.worker(t, tokenOf(7))
	ctx := context.Background()
	// Metadata names are C# identifiers (no '-'), lower-cased in the
	// signature: '_' before a digit is where the service's order and
	// bytes part. Azurite (ICU collation) agrees with the service on
	// these. fencing1 sorts by bytes before the gateway's own stamp
	// (fencing_token), and after it in the service's order: only the
	// forward's signature tells.
	sets := [][]string{{"a_b", "a1", "aB"}, {"z_1", "z1", "zA"}, {"fencing1"}}
	md := func(names []string) map[string]*string {
		m := map[string]*string{}
		for _, n := range names {
			m[n] = to("v-" + n)
		}
		return m
	}
	check := func(name, body string, names []string) {
		t.Helper()
		got, stamp := e.stored(t, name)
		_, m := e.props(t, name)
		if got != body || stamp != "7" {
			t.Fatalf("%s = %q stamp %q; want %q stamped 7", name, got, stamp, body)
		}
		for _, n := range names {
			if v := meta(m, n); v != "v-"+n {
				t.Fatalf("%s: metadata %s = %q; want %q (all: %v)", name, n, v, "v-"+n, m)
			}
		}
	}
	for i, names := range sets {
		blobName := "put/" + names[0]
		if _, err := w.UploadBuffer(ctx, azContainer, blobName, []byte("P"),
			&azblob.UploadBufferOptions{Metadata: md(names)}); err != nil {
			t.Fatalf("set %d %q: Put Blob: %v", i, names, err)
		}
		check(blobName, "P", names)

		bc := w.ServiceClient().NewContainerClient(azContainer).NewBlockBlobClient("blocks/" + names[0])
		id := "YmxvY2stMDA="
		if _, err := bc.StageBlock(ctx, id, streaming.NopCloser(strings.NewReader("BB")), nil); err != nil {
			t.Fatalf("set %d: Put Block: %v", i, err)
		}
		if _, err := bc.CommitBlockList(ctx, []string{id}, &blockblob.CommitBlockListOptions{Metadata: md(names)}); err != nil {
			t.Fatalf("set %d %q: Put Block List: %v", i, names, err)
		}
		check("blocks/"+names[0], "BB", names)

		if _, err := w.ServiceClient().NewContainerClient(azContainer).NewBlobClient("put/"+names[0]).
			SetMetadata(ctx, md(append([]string{"extra"}, names...)), nil); err != nil {
			t.Fatalf("set %d %q: Set Blob Metadata: %v", i, names, err)
		}
		check(blobName, "P", append([]string{"extra"}, names...))
	}
}
