package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"

	"github.com/fencegate/fencegate/adapters/azure"
	"github.com/fencegate/fencegate/internal/testenv"
)

// The write-set oracle of Azure routes: the store's own state, read
// whole before and after each request, says what a request changed;
// nothing the gateway admits with a stale token may change anything.

// azShape is one request a worker can send: method, target (escaped path
// and raw query, relative to the account), headers and body.
type azShape struct {
	name           string
	method, target string
	hdr            [][2]string
	body           string
	chunked        bool // send the body without a Content-Length
}

// azSigned sends a shape to base (the gateway, or the account's service
// URL when account is the store's), signed with Shared Key as account
// with key; token > 0 adds the Fencing-Token header.
func azSigned(t testing.TB, base, account, key string, s azShape, token int64) (int, http.Header, string) {
	t.Helper()
	req, err := azSignedRequest(base, account, key, s, token)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, resp.Header, string(b)
}

func azSignedRequest(base, account, key string, s azShape, token int64) (*http.Request, error) {
	var body io.Reader = strings.NewReader(s.body)
	if s.chunked {
		body = io.MultiReader(strings.NewReader(s.body)) // no length known
	}
	req, err := http.NewRequest(s.method, base+s.target, body)
	if err != nil {
		return nil, err
	}
	if s.body == "" && !s.chunked {
		req.Body, req.ContentLength = nil, 0
	}
	if s.chunked {
		req.ContentLength = -1
	}
	for _, h := range s.hdr {
		req.Header.Add(h[0], h[1])
	}
	req.Header.Set("X-Ms-Date", time.Now().UTC().Format(http.TimeFormat))
	if req.Header.Get("X-Ms-Version") == "" {
		req.Header.Set("X-Ms-Version", "2021-12-02")
	}
	if token > 0 {
		req.Header.Set("Fencing-Token", fmt.Sprint(token))
	}
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte(azStringToSign(account, req)))
	req.Header.Set("Authorization", "SharedKey "+account+":"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	return req, nil
}

// azStringToSign is the Shared Key string of req (the REST documentation's
// form: x-ms-* headers in byte order, which the gateway accepts and which
// agrees with the service's order for the names the shapes use).
func azStringToSign(account string, req *http.Request) string {
	h := req.Header
	cl := ""
	if req.ContentLength > 0 {
		cl = fmt.Sprint(req.ContentLength)
	}
	var names []string
	vals := map[string][]string{}
	for k, vs := range h {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-ms-") {
			names = append(names, lk)
			vals[lk] = vs
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n + ":" + strings.Join(vals[n], ",") + "\n")
	}
	b.WriteString("/" + account + req.URL.EscapedPath())
	if q, err := url.ParseQuery(req.URL.RawQuery); err == nil {
		byName := map[string][]string{}
		var qn []string
		for k, vs := range q {
			lk := strings.ToLower(k)
			if _, ok := byName[lk]; !ok {
				qn = append(qn, lk)
			}
			byName[lk] = append(byName[lk], vs...)
		}
		sort.Strings(qn)
		for _, n := range qn {
			vs := byName[n]
			sort.Strings(vs)
			b.WriteString("\n" + n + ":" + strings.Join(vs, ","))
		}
	}
	return strings.Join([]string{req.Method, h.Get("Content-Encoding"), h.Get("Content-Language"), cl,
		h.Get("Content-Md5"), h.Get("Content-Type"), "", h.Get("If-Modified-Since"), h.Get("If-Match"),
		h.Get("If-None-Match"), h.Get("If-Unmodified-Since"), h.Get("Range"), b.String()}, "\n")
}

// azWorld is Azurite behind a gateway (stamping, precondition etag), with
// objects whose fences were raised to azHigh through the gateway.
type azWorld struct {
	srv *testenv.AzuriteServer
	p   *Proc
	gw  string
	// snapshotID is the snapshot of fenced/victim the world holds.
	snapshotID string
}

const (
	azHigh    = 100
	azLeaseID = "11111111-2222-3333-4444-555555555555"
)

// azBlockXML is a Put Block List body naming id.
func azBlockXML(id string) string {
	return `<?xml version="1.0" encoding="utf-8"?><BlockList><Latest>` + id + `</Latest></BlockList>`
}

var azBlockID = base64.StdEncoding.EncodeToString([]byte("block-0001"))

// newAzWorld starts Azurite and a gateway, and writes through the gateway
// with token azHigh: the containers fenced and other (their metadata, so
// that each container's fence is azHigh for every blob in it), block blobs
// with metadata, tags, a snapshot and a staged block, a page blob, an
// append blob, a leased blob, and the container fresh (created and
// deleted, so that its name is fenced too).
func newAzWorld(t testing.TB) *azWorld {
	t.Helper()
	srv := testenv.Azurite(t)
	p := startFencegate(t, s3GatewayYAML(azRouteYAML("blobs", "", srv.Endpoint, "etag", "30s")))
	w := &azWorld{srv: srv, p: p, gw: p.URL("gateway")}
	must := func(s azShape, want int) {
		t.Helper()
		if st, _, body := azSigned(t, w.gw, azWorkerAccount, azWorkerKey, s, azHigh); st != want {
			t.Fatalf("seed %s: %d %s; want %d", s.name, st, body, want)
		}
	}
	blockBlob := [][2]string{{"X-Ms-Blob-Type", "BlockBlob"}, {"X-Ms-Meta-Owner", "B"}}
	for _, c := range []string{"fenced", "other", "fresh"} {
		must(azShape{name: "create " + c, method: "PUT", target: "/" + c + "?restype=container"}, http.StatusCreated)
		must(azShape{name: "container metadata " + c, method: "PUT", target: "/" + c + "?restype=container&comp=metadata",
			hdr: [][2]string{{"X-Ms-Meta-Owner", "B"}}}, http.StatusOK)
	}
	must(azShape{name: "delete fresh", method: "DELETE", target: "/fresh?restype=container"}, http.StatusAccepted)
	for _, b := range []string{"/fenced/victim", "/fenced/dir%2Fvictim", "/fenced/src", "/fenced/leased", "/other/victim2", "/fenced/staged"} {
		must(azShape{name: "put " + b, method: "PUT", target: b, hdr: blockBlob, body: "B-" + b}, http.StatusCreated)
	}
	must(azShape{name: "tags", method: "PUT", target: "/fenced/victim?comp=tags", hdr: [][2]string{{"Content-Type", "application/xml"}},
		body: `<?xml version="1.0" encoding="utf-8"?><Tags><TagSet><Tag><Key>owner</Key><Value>B</Value></Tag></TagSet></Tags>`}, http.StatusNoContent)
	must(azShape{name: "stage", method: "PUT", target: "/fenced/staged?comp=block&blockid=" + url.QueryEscape(azBlockID), body: "staged-by-B"}, http.StatusCreated)
	must(azShape{name: "page blob", method: "PUT", target: "/fenced/page", hdr: [][2]string{{"X-Ms-Blob-Type", "PageBlob"}, {"X-Ms-Blob-Content-Length", "1024"}}}, http.StatusCreated)
	must(azShape{name: "put page", method: "PUT", target: "/fenced/page?comp=page", hdr: [][2]string{{"X-Ms-Page-Write", "update"}, {"X-Ms-Range", "bytes=0-511"}},
		body: strings.Repeat("B", 512)}, http.StatusCreated)
	must(azShape{name: "append blob", method: "PUT", target: "/fenced/append", hdr: [][2]string{{"X-Ms-Blob-Type", "AppendBlob"}}}, http.StatusCreated)
	must(azShape{name: "append block", method: "PUT", target: "/fenced/append?comp=appendblock", body: "B-append"}, http.StatusCreated)
	must(azShape{name: "lease", method: "PUT", target: "/fenced/leased?comp=lease", hdr: [][2]string{{"X-Ms-Lease-Action", "acquire"},
		{"X-Ms-Lease-Duration", "-1"}, {"X-Ms-Proposed-Lease-Id", azLeaseID}}}, http.StatusCreated)
	st, h, body := azSigned(t, w.gw, azWorkerAccount, azWorkerKey, azShape{name: "snapshot", method: "PUT", target: "/fenced/victim?comp=snapshot"}, azHigh)
	if st != http.StatusCreated {
		t.Fatalf("seed snapshot: %d %s", st, body)
	}
	w.snapshotID = h.Get("X-Ms-Snapshot")
	return w
}

// state reads Azurite's whole state, with the store account's key and
// never through the gateway: every container (properties, metadata, ACL),
// every blob and snapshot (properties, content hash, metadata, tags, block
// list). Keys are what, values what it holds.
func (w *azWorld) state(t testing.TB) map[string]string {
	t.Helper()
	ctx := context.Background()
	svc := w.srv.Client(t).ServiceClient()
	out := map[string]string{}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	pager := svc.NewListContainersPager(&service.ListContainersOptions{Include: service.ListContainersInclude{Metadata: true}})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("oracle: list containers: %v", err)
		}
		for _, c := range page.ContainerItems {
			name := *c.Name
			out["container "+name] = js(c.Properties) + js(c.Metadata)
			cc := svc.NewContainerClient(name)
			acl, err := cc.GetAccessPolicy(ctx, nil)
			if err != nil {
				t.Fatalf("oracle: ACL of %s: %v", name, err)
			}
			out["acl "+name] = js(acl.SignedIdentifiers) + js(acl.BlobPublicAccess)
			w.blobs(t, cc, name, out)
		}
	}
	return out
}

func (w *azWorld) blobs(t testing.TB, cc *container.Client, cname string, out map[string]string) {
	t.Helper()
	ctx := context.Background()
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	pager := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Include: container.ListBlobsInclude{
		Metadata: true, Snapshots: true, UncommittedBlobs: true, Copy: true, Tags: true}})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("oracle: list blobs of %s: %v", cname, err)
		}
		for _, b := range page.Segment.BlobItems {
			key := "blob " + cname + "/" + *b.Name
			bc := cc.NewBlobClient(*b.Name)
			if b.Snapshot != nil && *b.Snapshot != "" {
				key += "@" + *b.Snapshot
				bc, _ = bc.WithSnapshot(*b.Snapshot)
			}
			out[key] = js(b.Properties) + js(b.BlobTags)
			out[key+" metadata"] = js(b.Metadata)
			if r, err := bc.DownloadStream(ctx, nil); err == nil {
				hs := sha256.New()
				io.Copy(hs, r.Body)
				r.Body.Close()
				out[key+" content"] = base64.StdEncoding.EncodeToString(hs.Sum(nil))
			} else {
				out[key+" content"] = "error " + azErrCode(err)
			}
			if b.Snapshot == nil || *b.Snapshot == "" {
				if tags, err := bc.GetTags(ctx, nil); err == nil {
					out[key+" tags"] = js(tags.BlobTagSet)
				}
				if b.Properties.BlobType != nil && *b.Properties.BlobType == "BlockBlob" {
					bl, err := cc.NewBlockBlobClient(*b.Name).GetBlockList(ctx, blockblob.BlockListTypeAll, nil)
					if err == nil {
						out[key+" blocks"] = js(bl.BlockList)
					} else {
						out[key+" blocks"] = "error " + azErrCode(err)
					}
				}
			}
		}
	}
}

func azErrCode(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return fmt.Sprintf("%d %s", re.StatusCode, re.ErrorCode)
	}
	return err.Error()
}

// azDiff lists what changed between two states.
func azDiff(before, after map[string]string) []string {
	var d []string
	for k, v := range before {
		if a, ok := after[k]; !ok {
			d = append(d, "removed "+k)
		} else if a != v {
			d = append(d, fmt.Sprintf("changed %s:\n\t%s\n\t-> %s", k, v, a))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "added "+k+": "+after[k])
		}
	}
	slices.Sort(d)
	return d
}

// azCorpus is every Blob service write a worker can send, with the
// spellings and encodings a store might read otherwise. src is the
// store's URL of a source blob.
func azCorpus(w *azWorld) []azShape {
	bb := [2]string{"X-Ms-Blob-Type", "BlockBlob"}
	src := [2]string{"X-Ms-Copy-Source", w.gw + "/fenced/src"}
	id := url.QueryEscape(azBlockID)
	tags := `<?xml version="1.0" encoding="utf-8"?><Tags><TagSet><Tag><Key>owner</Key><Value>A</Value></Tag></TagSet></Tags>`
	acl := `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>a</Id><AccessPolicy><Permission>rwd</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`
	lease := func(action string, extra ...[2]string) [][2]string {
		return append([][2]string{{"X-Ms-Lease-Action", action}}, extra...)
	}
	batch := "--batch_x\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: 0\r\n\r\n" +
		"DELETE /fenced/victim HTTP/1.1\r\nx-ms-date: " + time.Now().UTC().Format(http.TimeFormat) + "\r\nContent-Length: 0\r\n\r\n\r\n--batch_x--\r\n"
	batchCT := [2]string{"Content-Type", "multipart/mixed; boundary=batch_x"}
	return []azShape{
		// Blob writes, as the SDKs send them.
		{name: "put blob", method: "PUT", target: "/fenced/victim", hdr: [][2]string{bb, {"X-Ms-Meta-Owner", "A"}}, body: "A"},
		{name: "put blob %2F name", method: "PUT", target: "/fenced/dir%2Fvictim", hdr: [][2]string{bb}, body: "A"},
		{name: "put blob / name", method: "PUT", target: "/fenced/dir/victim", hdr: [][2]string{bb}, body: "A"},
		{name: "put blob new name", method: "PUT", target: "/fenced/new", hdr: [][2]string{bb}, body: "A"},
		{name: "put blob other container", method: "PUT", target: "/other/victim2", hdr: [][2]string{bb}, body: "A"},
		{name: "create page blob", method: "PUT", target: "/fenced/dir%2Fvictim", hdr: [][2]string{{"X-Ms-Blob-Type", "PageBlob"}, {"X-Ms-Blob-Content-Length", "512"}}},
		{name: "create append blob", method: "PUT", target: "/fenced/dir%2Fvictim", hdr: [][2]string{{"X-Ms-Blob-Type", "AppendBlob"}}},
		{name: "put block", method: "PUT", target: "/fenced/victim?comp=block&blockid=" + id, body: "A-block"},
		{name: "put block list", method: "PUT", target: "/fenced/staged?comp=blocklist", body: azBlockXML(azBlockID)},
		{name: "put block from url", method: "PUT", target: "/fenced/victim?comp=block&blockid=" + id, hdr: [][2]string{src}},
		{name: "append block", method: "PUT", target: "/fenced/append?comp=appendblock", body: "A"},
		{name: "append block from url", method: "PUT", target: "/fenced/append?comp=appendblock", hdr: [][2]string{src}},
		{name: "put page", method: "PUT", target: "/fenced/page?comp=page", hdr: [][2]string{{"X-Ms-Page-Write", "update"}, {"X-Ms-Range", "bytes=0-511"}}, body: strings.Repeat("A", 512)},
		{name: "clear page", method: "PUT", target: "/fenced/page?comp=page", hdr: [][2]string{{"X-Ms-Page-Write", "clear"}, {"X-Ms-Range", "bytes=0-511"}}},
		{name: "put page from url", method: "PUT", target: "/fenced/page?comp=page", hdr: [][2]string{{"X-Ms-Page-Write", "update"}, {"X-Ms-Range", "bytes=0-511"},
			{"X-Ms-Source-Range", "bytes=0-511"}, src}},
		{name: "copy blob", method: "PUT", target: "/fenced/victim", hdr: [][2]string{src}},
		{name: "sync copy", method: "PUT", target: "/fenced/victim", hdr: [][2]string{src, {"X-Ms-Requires-Sync", "true"}}},
		{name: "put blob from url", method: "PUT", target: "/fenced/victim", hdr: [][2]string{src, bb}},
		{name: "set metadata", method: "PUT", target: "/fenced/victim?comp=metadata", hdr: [][2]string{{"X-Ms-Meta-Owner", "A"}}},
		{name: "set properties", method: "PUT", target: "/fenced/victim?comp=properties", hdr: [][2]string{{"X-Ms-Blob-Content-Type", "text/a"}}},
		{name: "set tags", method: "PUT", target: "/fenced/victim?comp=tags", hdr: [][2]string{{"Content-Type", "application/xml"}}, body: tags},
		{name: "set tier", method: "PUT", target: "/fenced/victim?comp=tier", hdr: [][2]string{{"X-Ms-Access-Tier", "Cool"}}},
		{name: "snapshot", method: "PUT", target: "/fenced/victim?comp=snapshot"},
		{name: "lease acquire", method: "PUT", target: "/fenced/src?comp=lease", hdr: lease("acquire", [2]string{"X-Ms-Lease-Duration", "-1"})},
		{name: "lease break", method: "PUT", target: "/fenced/leased?comp=lease", hdr: lease("break")},
		{name: "lease release", method: "PUT", target: "/fenced/leased?comp=lease", hdr: lease("release", [2]string{"X-Ms-Lease-Id", azLeaseID})},
		{name: "lease change", method: "PUT", target: "/fenced/leased?comp=lease", hdr: lease("change", [2]string{"X-Ms-Lease-Id", azLeaseID},
			[2]string{"X-Ms-Proposed-Lease-Id", "99999999-2222-3333-4444-555555555555"})},
		{name: "lease renew", method: "PUT", target: "/fenced/leased?comp=lease", hdr: lease("renew", [2]string{"X-Ms-Lease-Id", azLeaseID})},
		{name: "undelete", method: "PUT", target: "/fenced/victim?comp=undelete"},
		{name: "abort copy", method: "PUT", target: "/fenced/victim?comp=copy&copyid=x", hdr: [][2]string{{"X-Ms-Copy-Action", "abort"}}},
		{name: "seal", method: "PUT", target: "/fenced/append?comp=seal"},
		{name: "expiry", method: "PUT", target: "/fenced/victim?comp=expiry", hdr: [][2]string{{"X-Ms-Expiry-Option", "NeverExpire"}}},
		{name: "legal hold", method: "PUT", target: "/fenced/victim?comp=legalhold", hdr: [][2]string{{"X-Ms-Legal-Hold", "true"}}},
		{name: "immutability policy", method: "PUT", target: "/fenced/victim?comp=immutabilityPolicies",
			hdr: [][2]string{{"X-Ms-Immutability-Policy-Until-Date", "Fri, 01 Jan 2100 00:00:00 GMT"}}},
		{name: "incremental copy", method: "PUT", target: "/fenced/victim?comp=incrementalcopy", hdr: [][2]string{src}},
		// Containers.
		{name: "create container", method: "PUT", target: "/fresh?restype=container"},
		{name: "container metadata", method: "PUT", target: "/fenced?restype=container&comp=metadata", hdr: [][2]string{{"X-Ms-Meta-Owner", "A"}}},
		{name: "container acl", method: "PUT", target: "/fenced?restype=container&comp=acl", hdr: [][2]string{{"X-Ms-Blob-Public-Access", "container"}}, body: acl},
		{name: "container lease", method: "PUT", target: "/fenced?restype=container&comp=lease", hdr: lease("acquire", [2]string{"X-Ms-Lease-Duration", "-1"},
			[2]string{"X-Ms-Proposed-Lease-Id", azLeaseID})},
		{name: "rename container", method: "PUT", target: "/fresh?restype=container&comp=rename", hdr: [][2]string{{"X-Ms-Source-Container-Name", "fenced"}}},
		{name: "rename onto a fenced container", method: "PUT", target: "/other?restype=container&comp=rename", hdr: [][2]string{{"X-Ms-Source-Container-Name", "fenced"}}},
		{name: "restore container", method: "PUT", target: "/fresh?restype=container&comp=undelete",
			hdr: [][2]string{{"X-Ms-Deleted-Container-Name", "fresh"}, {"X-Ms-Deleted-Container-Version", "01D60F8BB59A4652"}}},
		{name: "container batch", method: "POST", target: "/fenced?restype=container&comp=batch", hdr: [][2]string{batchCT}, body: batch},
		{name: "account batch", method: "POST", target: "/?comp=batch", hdr: [][2]string{batchCT}, body: batch},
		{name: "service properties", method: "PUT", target: "/?restype=service&comp=properties",
			body: `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><DefaultServiceVersion>2021-12-02</DefaultServiceVersion></StorageServiceProperties>`},
		// Spellings the store reads otherwise.
		{name: "comp=Block", method: "PUT", target: "/fenced/victim?comp=Block&blockid=" + id, hdr: [][2]string{bb}, body: "A"},
		{name: "Comp=lease&COMP=metadata", method: "PUT", target: "/fenced/victim?Comp=lease&COMP=metadata", hdr: [][2]string{bb, {"X-Ms-Lease-Action", "acquire"}}, body: "A"},
		{name: "comp=METADATA", method: "PUT", target: "/fenced/victim?comp=METADATA", hdr: [][2]string{bb}, body: "A"},
		{name: "COMP=metadata", method: "PUT", target: "/fenced/victim?COMP=metadata", hdr: [][2]string{bb}, body: "A"},
		{name: "comp twice", method: "PUT", target: "/fenced/victim?comp=metadata&comp=metadata", hdr: [][2]string{bb}, body: "A"},
		{name: "comp empty", method: "PUT", target: "/fenced/victim?comp=", hdr: [][2]string{bb}, body: "A"},
		{name: "comp[]", method: "PUT", target: "/fenced/victim?comp[]=metadata", hdr: [][2]string{bb}, body: "A"},
		{name: "semicolon", method: "PUT", target: "/fenced/victim?comp=metadata;comp=block", hdr: [][2]string{bb}, body: "A"},
		{name: "encoded name", method: "PUT", target: "/fenced/victim?c%6Fmp=metadata", hdr: [][2]string{{"X-Ms-Meta-Owner", "A"}}},
		{name: "encoded value", method: "PUT", target: "/fenced/victim?comp=block%6Cist", body: azBlockXML(azBlockID)},
		{name: "restype=Container", method: "DELETE", target: "/fenced?restype=Container"},
		{name: "RESTYPE=container", method: "DELETE", target: "/fenced?RESTYPE=container"},
		{name: "put block without blockid", method: "PUT", target: "/fenced/victim?comp=block", hdr: [][2]string{bb}, body: "A"},
		{name: "put block empty blockid", method: "PUT", target: "/fenced/victim?comp=block&blockid=", hdr: [][2]string{bb}, body: "A"},
		{name: "tier without tier, with a source", method: "PUT", target: "/fenced/victim?comp=tier", hdr: [][2]string{src}},
		{name: "lease action ACQUIRE", method: "PUT", target: "/fenced/victim?comp=lease", hdr: [][2]string{{"X-Ms-Lease-Action", "ACQUIRE"}, bb}, body: "A"},
		{name: "delete with unknown comp", method: "DELETE", target: "/fenced/victim?comp=immutabilityPolicies"},
		{name: "delete container with comp", method: "DELETE", target: "/fenced?restype=container&comp=acl"},
		{name: "chunked put block", method: "PUT", target: "/fenced/victim?comp=block&blockid=" + id, hdr: [][2]string{src}, body: "A", chunked: true},
		{name: "copy source twice", method: "PUT", target: "/fenced/victim", hdr: [][2]string{src, src}},
		{name: "empty If-Match", method: "PUT", target: "/fenced/victim", hdr: [][2]string{bb, {"If-Match", ""}}, body: "A"},
		{name: "empty If-None-Match", method: "PUT", target: "/fenced/victim", hdr: [][2]string{bb, {"If-None-Match", ""}}, body: "A"},
		// Paths.
		{name: "dot-dot in %2F", method: "PUT", target: "/fenced/dir%2F..%2Fvictim", hdr: [][2]string{bb}, body: "A"},
		{name: "dot segment", method: "PUT", target: "/fenced/./victim", hdr: [][2]string{bb}, body: "A"},
		{name: "empty segment", method: "PUT", target: "/fenced//victim", hdr: [][2]string{bb}, body: "A"},
		{name: "trailing slash", method: "PUT", target: "/fenced/victim/", hdr: [][2]string{bb}, body: "A"},
		{name: "container case", method: "PUT", target: "/Fenced/victim", hdr: [][2]string{bb}, body: "A"},
		{name: "container %2F blob", method: "PUT", target: "/fenced%2Fvictim", hdr: [][2]string{bb}, body: "A"},
		{name: "root container", method: "PUT", target: "/victim", hdr: [][2]string{bb}, body: "A"},
		// Other dialects the emulator serves (Data Lake).
		{name: "dfs create with rename source", method: "PUT", target: "/fenced/moved?mode=legacy", hdr: [][2]string{{"X-Ms-Rename-Source", "/fenced/victim"}}},
		{name: "dfs create file", method: "PUT", target: "/fenced/new?resource=file"},
		{name: "dfs append", method: "PATCH", target: "/fenced/victim?action=append&position=0", body: "A"},
		{name: "MERGE", method: "MERGE", target: "/fenced/victim?comp=metadata", hdr: [][2]string{{"X-Ms-Meta-Owner", "A"}}},
		// Deletes last: the white-box pass sends the corpus to the store in order.
		{name: "delete snapshot", method: "DELETE", target: "/fenced/victim?snapshot=" + url.QueryEscape(w.snapshotID)},
		{name: "delete blob", method: "DELETE", target: "/fenced/victim", hdr: [][2]string{{"X-Ms-Delete-Snapshots", "include"}}},
		{name: "delete %2F blob", method: "DELETE", target: "/fenced/dir%2Fvictim"},
		{name: "delete container", method: "DELETE", target: "/fenced?restype=container", hdr: [][2]string{{"X-Ms-Lease-Id", azLeaseID}}},
	}
}

// Black-box oracle: fences raised to 100 through the gateway on every
// container and blob the corpus names; each shape sent through the gateway
// with token 5, signed as the worker; Azurite's whole state read before
// and after: any change fails. Every shape must be refused by the gateway
// for what it is (the fence or its classification), never by a signature
// the test got wrong (403 would hide a write). Then the control: a sample
// of the same shapes sent directly to Azurite with the account's key
// changes the state, so the oracle sees each kind of change.
func TestAzureWriteSetOracle(t *testing.T) {
	w := newAzWorld(t)
	corpus := azCorpus(w)
	if len(corpus) < 50 {
		t.Fatalf("corpus has %d shapes; want at least 50", len(corpus))
	}
	before := w.state(t)
	if again := w.state(t); len(azDiff(before, again)) != 0 {
		t.Fatalf("oracle: two reads of an unchanged store differ: %v", azDiff(before, again))
	}
	codes := map[string]int{}
	for _, s := range corpus {
		st, h, body := azSigned(t, w.gw, azWorkerAccount, azWorkerKey, s, 5)
		code := h.Get("X-Ms-Error-Code")
		codes[code]++
		if st < 400 || st == http.StatusForbidden || !strings.Contains(body, "<Code>"+code+"</Code>") {
			t.Errorf("%s: %d %s %.300s; want a refusal in the Blob service's format, not 403", s.name, st, code, body)
		}
		after := w.state(t)
		if d := azDiff(before, after); len(d) > 0 {
			t.Errorf("%s (%d %s) changed the store:\n%s", s.name, st, code, strings.Join(d, "\n"))
			before = after
		}
	}
	t.Logf("%d shapes, refusals by code: %v", len(corpus), codes)

	// White-box: each shape the gateway admits sent straight to Azurite
	// with the account's key; what the store changed is the shape's write
	// set, which the gateway's classification must cover (the container it
	// fences with its blobs, or the one blob, snapshots included). The
	// controls must change something: the oracle is not blind to them
	// (comp=Block, which the gateway refuses, shows what Azurite makes of
	// it). Other refused shapes are not sent: Azurite answers some of them
	// (x-ms-lease-action: ACQUIRE) with a state its listing then fails on.
	controls := []string{"put block", "set metadata", "set tags", "set properties", "snapshot", "lease acquire",
		"put page", "append block", "put block list", "container metadata", "container acl", "comp=Block", "delete blob"}
	changedBy := map[string]bool{}
	for _, s := range corpus {
		direct := s
		direct.hdr = slices.Clone(s.hdr)
		for i, h := range direct.hdr {
			direct.hdr[i][1] = strings.ReplaceAll(h[1], w.gw, w.srv.Endpoint)
		}
		req, err := azSignedRequest(w.gw, azWorkerAccount, azWorkerKey, s, 5)
		if err != nil {
			t.Fatal(err)
		}
		cl, refusal := azure.Classify(req)
		fenced := cl.Fenced
		if refusal != nil && !slices.Contains(controls, s.name) {
			continue
		}
		st, _, body := azSigned(t, w.srv.Endpoint, w.srv.Account, w.srv.Key, direct, 0)
		after := w.state(t)
		d := azDiff(before, after)
		before = after
		changedBy[s.name] = len(d) > 0
		if os.Getenv("AZ_ORACLE_VERBOSE") != "" {
			t.Logf("direct %s: %d %.160s; %d changes", s.name, st, body, len(d))
		}
		if refusal != nil || len(d) == 0 {
			continue
		}
		for _, line := range d {
			f := strings.Fields(line)
			obj := strings.TrimSuffix(f[2], ":")
			obj, _, _ = strings.Cut(obj, "@") // a snapshot is its blob's
			obj = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(obj, " content"), " tags"), " blocks")
			c, _, _ := strings.Cut(obj, "/")
			if obj != fenced && c != fenced {
				t.Errorf("%s: the store (%d %.100s) changed %s; the gateway fences %q:\n%s", s.name, st, body, obj, fenced, line)
			}
			// The store replaced a blob's metadata (or made a blob): the
			// gateway must know it, or its stamp would be erased.
			base := !strings.Contains(line, "@")
			setMeta := strings.Contains(line, " metadata:") && (strings.HasPrefix(line, "changed blob ") ||
				strings.HasPrefix(line, "added blob ") && !strings.HasSuffix(line, ": null"))
			if base && setMeta && !cl.SetsMetadata && len(f) > 1 && f[1] == "blob" {
				t.Errorf("%s: the store replaced the metadata of %s; the gateway classified a write that leaves it (no stamp):\n%s", s.name, obj, line)
			}
		}
	}
	for _, name := range controls {
		if !changedBy[name] {
			t.Errorf("control %s sent to Azurite changed nothing the oracle sees", name)
		}
	}
	t.Logf("changed the store when sent directly: %d of %d shapes", countTrue(changedBy), len(corpus))
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// azFencedContainers are the containers newAzWorld fenced at azHigh.
var azFencedContainers = []string{"fenced", "other", "fresh"}

// azUnfencedOnly reports whether every change in d is to a container no
// one fenced (the fuzz target may create one, legitimately), and names
// those containers.
func azUnfencedOnly(d []string) ([]string, bool) {
	var names []string
	for _, line := range d {
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, false
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[2], ":"), "/")
		if slices.Contains(azFencedContainers, name) {
			return nil, false
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, true
}

// azFuzzHeaders are the headers the fuzz target picks from (bit i of the
// mask: header i); value replaces the value of those marked "".
var azFuzzHeaders = [][2]string{
	{"X-Ms-Blob-Type", "BlockBlob"}, {"X-Ms-Copy-Source", ""}, {"X-Ms-Requires-Sync", "true"},
	{"X-Ms-Lease-Action", ""}, {"X-Ms-Page-Write", ""}, {"X-Ms-Range", "bytes=0-511"},
	{"X-Ms-Copy-Action", "abort"}, {"X-Ms-Source-Container-Name", "fenced"}, {"X-Ms-Rename-Source", "/fenced/victim"},
	{"X-Ms-Meta-Owner", "A"}, {"X-Ms-Access-Tier", ""}, {"If-Match", ""}, {"X-Ms-Lease-Id", azLeaseID},
	{"X-Ms-Deleted-Container-Name", "fenced"}, {"If-None-Match", ""}, {"X-Ms-Blob-Content-Length", "512"},
}

// azFuzzClient gives up on a request the gateway does not answer: a hang
// is a finding too.
var azFuzzClient = &http.Client{Timeout: 30 * time.Second}

var azFuzzMethods = []string{"PUT", "DELETE", "POST", "PATCH", "MERGE", "PUT"}
var azFuzzPrefixes = []string{"/fenced", "/other", "/fresh", "/fenced/", "/other/", "/", "/fenced/victim", "/fenced/page"}

// FuzzAzureOracle mutates request shapes (method, path bytes after a
// fenced container, the raw query, which selecting headers are sent and
// one of their values) and checks the black-box oracle on each: sent
// through the gateway with token 5, nothing in Azurite changes, except
// under a container no one fenced.
//
//	go test -run '^$' -fuzz FuzzAzureOracle -parallel 1 -fuzztime 10m ./e2e/
func FuzzAzureOracle(f *testing.F) {
	f.Add(uint8(0), uint8(6), "", "comp=Block&blockid=YQ%3D%3D", uint16(1), "")
	f.Add(uint8(0), uint8(6), "", "Comp=lease&COMP=metadata", uint16(1|1<<3), "acquire")
	f.Add(uint8(0), uint8(2), "", "restype=container&comp=rename", uint16(1<<7), "")
	f.Add(uint8(0), uint8(7), "", "comp=page", uint16(1<<4|1<<5), "update")
	f.Add(uint8(1), uint8(0), "", "restype=container", uint16(0), "")
	f.Add(uint8(0), uint8(6), "", "comp=tier", uint16(1<<1), "Cool")
	if fz := flag.Lookup("test.fuzz"); fz != nil && fz.Value.String() != "" {
		if wk := flag.Lookup("test.fuzzworker"); wk == nil || wk.Value.String() != "true" {
			// The coordinator runs no input: no store for it.
			f.Fuzz(func(*testing.T, uint8, uint8, string, string, uint16, string) {})
			return
		}
	}
	w := newAzWorld(f)
	before := w.state(f)
	f.Fuzz(func(t *testing.T, m, prefix uint8, path, rawQuery string, mask uint16, value string) {
		if len(path) > 200 || len(rawQuery) > 300 || len(value) > 100 {
			return
		}
		s := azShape{name: "fuzz", method: azFuzzMethods[int(m)%len(azFuzzMethods)],
			target: azFuzzPrefixes[int(prefix)%len(azFuzzPrefixes)] + path, body: "A"}
		if rawQuery != "" {
			s.target += "?" + rawQuery
		}
		if mask&(1<<4) != 0 || mask&(1<<5) != 0 {
			s.body = strings.Repeat("A", 512)
		}
		for i, h := range azFuzzHeaders {
			if mask&(1<<i) == 0 {
				continue
			}
			if h[1] == "" {
				h[1] = value
				if h[0] == "X-Ms-Copy-Source" {
					h[1] = w.gw + "/fenced/src" + value
				}
			}
			if strings.ContainsAny(h[1], "\r\n\x00") {
				return
			}
			s.hdr = append(s.hdr, h)
		}
		req, err := azSignedRequest(w.gw, azWorkerAccount, azWorkerKey, s, 5)
		if err != nil {
			return // not a request a client can send
		}
		resp, err := azFuzzClient.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) && ue.Timeout() {
				t.Fatalf("%s %s %q: no answer in %s", s.method, s.target, s.hdr, azFuzzClient.Timeout)
			}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		after := w.state(t)
		d := azDiff(before, after)
		if len(d) == 0 {
			return
		}
		names, ok := azUnfencedOnly(d)
		if !ok {
			t.Fatalf("%s %s %q (%s %s) changed the store:\n%s", s.method, s.target, s.hdr, resp.Status, resp.Header.Get("X-Ms-Error-Code"), strings.Join(d, "\n"))
		}
		// A container no one fenced: the write was the worker's to make.
		for _, n := range names {
			w.srv.Client(t).DeleteContainer(context.Background(), n, nil)
		}
		before = w.state(t)
	})
}
