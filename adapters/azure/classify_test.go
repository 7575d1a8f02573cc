package azure

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/httprefusal"
)

// Every write is one row of the table or refused, whatever spelling,
// repetition or missing parameter would make the store run another
// operation than the one the gateway classified.
func TestClassifyWrites(t *testing.T) {
	const refused = opRead - 1 // a refusal before the table (400, 411)
	for _, tc := range []struct {
		method, target string
		headers        []string // name: value
		want           op
	}{
		// The table.
		{"PUT", "/c/b", []string{"X-Ms-Blob-Type: BlockBlob"}, opBlob},
		{"PUT", "/c/b", []string{"X-Ms-Copy-Source: http://s/c/a"}, opCopy},
		{"PUT", "/c/b", []string{"X-Ms-Copy-Source: http://s/c/a", "X-Ms-Requires-Sync: true"}, opCopy},
		{"PUT", "/c/b", []string{"X-Ms-Copy-Source: http://s/c/a", "X-Ms-Blob-Type: BlockBlob"}, opCopy},
		{"PUT", "/c/b?comp=block&blockid=YQ%3D%3D", nil, opBlock},
		{"PUT", "/c/b?blockid=YQ%3D%3D&comp=block&timeout=30", []string{"X-Ms-Copy-Source: http://s/c/a"}, opBlock},
		{"PUT", "/c/b?comp=blocklist", nil, opBlockList},
		{"PUT", "/c/b?comp=page", []string{"X-Ms-Page-Write: update"}, opBlob},
		{"PUT", "/c/b?comp=appendblock", nil, opBlob},
		{"PUT", "/c/b?comp=metadata", []string{"If-Match: \"0x1\""}, opBlob},
		{"PUT", "/c/b?comp=tier", []string{"X-Ms-Access-Tier: Cool"}, opBlob},
		{"PUT", "/c/b?comp=lease", []string{"X-Ms-Lease-Action: acquire"}, opLease},
		{"PUT", "/c/b?comp=copy&copyid=x", []string{"X-Ms-Copy-Action: abort"}, opBlob},
		{"DELETE", "/c/b?snapshot=2024-01-01T00%3A00%3A00Z", nil, opBlob},
		{"PUT", "/c?restype=container", nil, opContainer},
		{"PUT", "/c?restype=container&comp=lease", []string{"X-Ms-Lease-Action: break"}, opContainer},
		{"DELETE", "/c?restype=container", nil, opContainer},
		// Spellings the store reads otherwise.
		{"PUT", "/c/b?comp=Block&blockid=YQ%3D%3D", nil, opUnsupported},
		{"PUT", "/c/b?Comp=block&blockid=YQ%3D%3D", nil, refused},
		{"PUT", "/c/b?Comp=lease&COMP=metadata", []string{"X-Ms-Lease-Action: acquire"}, refused},
		{"PUT", "/c/b?comp=lease&comp=metadata", []string{"X-Ms-Lease-Action: acquire"}, refused},
		{"PUT", "/c/b?comp=metadata&comp=metadata", nil, refused},
		{"PUT", "/c/b?comp=", []string{"X-Ms-Blob-Type: BlockBlob"}, refused},
		{"PUT", "/c/b?comp", []string{"X-Ms-Blob-Type: BlockBlob"}, refused},
		{"PUT", "/c/b?comp[]=metadata", nil, refused},
		{"PUT", "/c/b?comp=metadata;comp=block", nil, refused},
		{"PUT", "/c/b?c%6Fmp=metadata", nil, refused},
		{"PUT", "/c/b?comp=block%6Cist", nil, opBlockList},
		// One parser for every dialect (resource.ParseQuery): no empty pair.
		{"PUT", "/c/b?comp=metadata&", nil, refused},
		{"PUT", "/c/b?comp=metadata&&timeout=3", nil, refused},
		{"PUT", "/c?restype=Container", nil, opUnsupported},
		// Missing what selects the operation: the store falls back.
		{"PUT", "/c/b?comp=block", []string{"X-Ms-Blob-Type: BlockBlob"}, refused},
		{"PUT", "/c/b?comp=block", nil, refused},
		{"PUT", "/c/b?comp=block&blockid=", nil, refused},
		{"PUT", "/c/b?comp=block&blockid=YQ%3D%3D", []string{"X-Ms-Blob-Type: BlockBlob"}, refused},
		{"PUT", "/c/b?comp=tier", []string{"X-Ms-Copy-Source: http://s/c/a"}, refused},
		{"PUT", "/c/b?comp=tier", nil, refused},
		{"PUT", "/c/b?comp=lease", []string{"X-Ms-Lease-Action: Acquire"}, refused},
		{"PUT", "/c/b?comp=lease", nil, refused},
		{"PUT", "/c/b?comp=page", []string{"X-Ms-Page-Write: UPDATE"}, refused},
		{"PUT", "/c/b", nil, refused},
		{"PUT", "/c/b", []string{"X-Ms-Blob-Type: blockblob"}, refused},
		{"DELETE", "/c/b?comp=immutabilityPolicies", nil, opUnsupported},
		{"DELETE", "/c?restype=container&comp=acl", nil, opUnsupported},
		// Another resource named in a header, or in a body.
		{"PUT", "/c?restype=container&comp=rename", []string{"X-Ms-Source-Container-Name: victim"}, opUnsupported},
		{"PUT", "/c?restype=container&comp=metadata", []string{"X-Ms-Source-Container-Name: victim"}, refused},
		{"PUT", "/c/b", []string{"X-Ms-Blob-Type: BlockBlob", "X-Ms-Rename-Source: /c/victim"}, refused},
		{"POST", "/c?restype=container&comp=batch", nil, opUnsupported},
		{"PUT", "/c/b?comp=metadata&resource=file", nil, refused},
		// Conditions: once, not empty.
		{"PUT", "/c/b?comp=metadata", []string{"If-Match: "}, refused},
		{"PUT", "/c/b?comp=metadata", []string{"If-None-Match: "}, refused},
		{"PUT", "/c/b?comp=metadata", []string{"If-Match: \"a\"", "If-Match: \"b\""}, refused},
		{"PUT", "/c/b?comp=metadata", []string{"X-Ms-Lease-Id: "}, refused},
		{"PUT", "/c/b", []string{"X-Ms-Blob-Type: BlockBlob", "X-Ms-Blob-Type: PageBlob"}, refused},
		// Account writes.
		{"PUT", "/?restype=service&comp=properties", nil, opUnsupported},
		{"PATCH", "/c/b?comp=metadata", nil, opUnsupported},
	} {
		r := httptest.NewRequest(tc.method, "http://gw"+tc.target, nil)
		for _, h := range tc.headers {
			k, v, _ := strings.Cut(h, ": ")
			r.Header.Add(k, v)
		}
		for range 3 { // deterministic: no map order
			got, ferr := parseTarget(r)
			op := got.op
			if ferr != nil {
				op = refused
			}
			if op != tc.want {
				t.Errorf("%s %s %q: op %d (%v, %s); want %d", tc.method, tc.target, tc.headers, op, ferr, got.why, tc.want)
				break
			}
		}
	}
	// A body of unknown length.
	r := httptest.NewRequest("PUT", "http://gw/c/b?comp=block&blockid=YQ%3D%3D", strings.NewReader("x"))
	r.ContentLength = -1
	if _, ferr := parseTarget(r); ferr == nil || httprefusal.Status(ferr) != http.StatusLengthRequired {
		t.Errorf("chunked Put Block: %v; want 411", ferr)
	}
}
