package s3

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"reflect"
	"testing"
)

// A DeleteObjects body written anew with <ETag> conditions parses (by the
// strict parser) to the same objects and fields, the keys' special
// characters escaped.
func TestDeleteDocEncodeRoundTrip(t *testing.T) {
	body := `<?xml version="1.0"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>` +
		`<Object><Key>a&amp;b &lt;c&gt; "d"</Key></Object><Object><VersionId>v1</VersionId><Key>x/y</Key></Object></Delete>`
	doc, err := parseDeleteDoc([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	doc.objects[0].set("ETag", `"abc"`)
	again, err := parseDeleteDoc(doc.encode())
	if err != nil {
		t.Fatalf("%v:\n%s", err, doc.encode())
	}
	if !reflect.DeepEqual(doc, again) {
		t.Fatalf("round trip:\n%+v\n%+v", doc, again)
	}
	if got := again.objects[0].fields["Key"]; got != `a&b <c> "d"` {
		t.Fatalf("key %q", got)
	}
}

// rebody recomputes the integrity headers for the new body, refuses a
// worker's header that does not match its own body, and leaves alone a
// body whose integrity header it cannot compute.
func TestRebody(t *testing.T) {
	old, nb := []byte("old body"), []byte("new body")
	sum := sha256.Sum256(old)
	h := http.Header{}
	h.Set("X-Amz-Checksum-Crc32", checksum(bodyChecksums["X-Amz-Checksum-Crc32"], old))
	h.Set("Content-Md5", checksum(bodyChecksums["Content-Md5"], old))
	set, payload, ok, serr := rebody(h, hex.EncodeToString(sum[:]), old, nb)
	nsum := sha256.Sum256(nb)
	if serr != nil || !ok || payload != hex.EncodeToString(nsum[:]) ||
		set["X-Amz-Checksum-Crc32"] != checksum(bodyChecksums["X-Amz-Checksum-Crc32"], nb) ||
		set["Content-Md5"] != checksum(bodyChecksums["Content-Md5"], nb) {
		t.Fatalf("rebody = %v %q %v %v", set, payload, ok, serr)
	}
	if _, _, _, serr := rebody(h, hex.EncodeToString(nsum[:]), old, nb); serr == nil || serr.Code != "XAmzContentSHA256Mismatch" {
		t.Fatalf("wrong payload hash: %v", serr)
	}
	h.Set("X-Amz-Checksum-Crc32", "AAAAAA==")
	if _, _, _, serr := rebody(h, unsignedPayload, old, nb); serr == nil || serr.Code != "BadDigest" {
		t.Fatalf("wrong crc32: %v", serr)
	}
	h = http.Header{}
	h.Set("X-Amz-Checksum-Future", "x")
	if _, _, ok, serr := rebody(h, unsignedPayload, old, nb); ok || serr != nil {
		t.Fatalf("unknown checksum: ok %v %v", ok, serr)
	}
}
