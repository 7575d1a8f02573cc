package e2e

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// Request bodies against fake-gcs-server (memory and filesystem
// backends), through one gateway each with max_body_bytes: a compose
// (its names read before the fence) in every framing of the table, then
// the bodies a store may read otherwise than the gateway: encoded,
// multipart with duplicated or case-variant parameters, parts out of
// order. The store's whole state (gcsOracle.snapshot) and the fences are
// the oracle.
func TestBodyAttackGCS(t *testing.T) {
	for _, backend := range []string{"memory", "filesystem"} {
		t.Run(backend, func(t *testing.T) {
			o := startGCSStore(t, backend)
			p := startFencegate(t, s3GatewayYAML(gcsRouteYAML("objects", "", o.srv.Endpoint, "", "30s")+
				fmt.Sprintf("      max_body_bytes: %d\n", gcsBodyLimit)))
			o.gw = p.URL("gateway")
			o.seed(t, o.gw)
			fence := func(t *testing.T, object string) int64 {
				return fenceHighest(t, p.URL("admin"), gcsBucket+"/"+object)
			}
			// First: the table's control ends with the victim's fence at 101.
			t.Run("compose framings", func(t *testing.T) {
				runFramings(t, bodyStore{
					gw: o.gw,
					request: func(t *testing.T, token int64, body []byte) *http.Request {
						req, err := http.NewRequest(http.MethodPost, o.gw+"/storage/v1/b/"+gcsBucket+"/o/victim/compose", nil)
						if err != nil {
							t.Fatal(err)
						}
						req.Header.Set("Authorization", "Bearer "+gcsWorkerKey)
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Fencing-Token", fmt.Sprint(token))
						return req
					},
					body: func(n int) []byte {
						const doc = `{"sourceObjects":[{"name":"own"}]}`
						return []byte(doc + strings.Repeat(" ", max(n-len(doc), 0)))
					},
					state: func(t *testing.T) []string { return snapshotLines(o.snapshot(t)) },
					fence: func(t *testing.T) int64 { return fence(t, "victim") },
					high:  oracleHigh,
					limit: gcsBodyLimit,
				})
			})
			t.Run("bodies", func(t *testing.T) { gcsBodyAttacks(t, o, fence) })
		})
	}
}

// gcsBodyLimit is the GCS route's max_body_bytes: above the 64 KiB of a
// multipart upload the gateway holds whole before it forwards it, so that
// a body within it can stream.
const gcsBodyLimit = 128 << 10

// snapshotLines is a snapshot as sorted lines, for stateDiff.
func snapshotLines(s snapshot) []string {
	lines := make([]string, 0, len(s))
	for k, v := range s {
		lines = append(lines, k+"\t"+v)
	}
	slices.Sort(lines)
	return lines
}

// gcsBodyAttacks sends each body attack at the victim (fenced at 101 by
// the framings' control) with a fresh token (one above its fence) and a stale one (5):
// each must be refused with the store unchanged, token 5's own objects
// included, and before the fence (the victim's fence stays where it was)
// unless the gateway reads the body after it (a multipart upload's
// parts: it streams); the accepted rows write their object
// with the stamp of the token that wrote it and nothing else.
func gcsBodyAttacks(t *testing.T, o *gcsOracle, fence func(*testing.T, string) int64) {
	const up = "/upload/storage/v1/b/" + gcsBucket + "/o?uploadType="
	part := func(b, ct, doc string) string {
		return "--" + b + "\r\nContent-Type: " + ct + "\r\n\r\n" + doc + "\r\n"
	}
	related := func(b string, parts ...string) string {
		return strings.Join(parts, "") + "--" + b + "--\r\n"
	}
	plain := related("B", part("B", "application/json", `{"name":"victim"}`), part("B", "text/plain", "attack"))
	forged := related("B", part("B", "application/json", `{"name":"victim","metadata":{"fencing-token":"999"}}`), part("B", "text/plain", "forged"))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(forged))
	zw.Close()
	gzDoc := func(doc string) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(doc))
		zw.Close()
		return b.String()
	}
	// Two boundaries in one body: by A the metadata is {} (the gateway
	// stamps it) and the media holds a body by B, whose metadata carries a
	// forged stamp.
	twoWays := related("A", part("A", "application/json", "{}"), part("A", "text/plain", forged))
	mp := "multipart/related; boundary=B"
	for _, tc := range []struct {
		name string
		s    gcsShape
		// ctTwice: a second Content-Type header (net/http's Header.Set
		// would keep one).
		ctTwice string
		// applied: the row is a legitimate write of object, stored with
		// content and the fresh token's stamp (sent with the fresh token
		// only; "" refused with either token).
		object, content string
		// afterFence: refused once the body is read, after the fence
		// admitted the fresh token.
		afterFence bool
		// raw: sent with this framing of the table.
		raw string
	}{
		{name: "gzip-wrapped multipart: the gateway stamps the header comment, the store reads the content",
			s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim", ct: mp,
				hdr: map[string]string{"Content-Encoding": "gzip"}, body: string(gzipCommented("\r\n"+plain, forged))}},
		{name: "gzip multipart", s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim", ct: mp,
			hdr: map[string]string{"Content-Encoding": "gzip"}, body: gz.String()}},
		{name: "multipart with Content-Encoding: identity", s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim", ct: mp,
			hdr: map[string]string{"Content-Encoding": "identity"}, body: plain}},
		{name: "gzip compose", s: gcsShape{method: http.MethodPost, path: "/storage/v1/b/" + gcsBucket + "/o/victim/compose", ct: "application/json",
			hdr: map[string]string{"Content-Encoding": "gzip"}, body: gzDoc(`{"sourceObjects":[{"name":"own"}]}`)}},
		{name: "gzip resumable upload's resource", s: gcsShape{method: http.MethodPost, path: up + "resumable&name=victim", ct: "application/json",
			hdr: map[string]string{"Content-Encoding": "gzip"}, body: gzDoc(`{"name":"victim","metadata":{"fencing-token":"999"}}`), session: true}},
		{name: "gzip metadata update", s: gcsShape{method: http.MethodPatch, path: "/storage/v1/b/" + gcsBucket + "/o/victim", ct: "application/json",
			hdr: map[string]string{"Content-Encoding": "gzip"}, body: gzDoc(`{"metadata":{"fencing-token":"999"}}`)}},
		{name: "two Content-Type headers, another boundary each", s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim",
			ct: "multipart/related; boundary=A", body: twoWays}, ctTwice: "multipart/related; boundary=B"},
		{name: "boundary parameter twice, in another case", s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim",
			ct: "multipart/related; boundary=A; Boundary=B", body: twoWays}},
		{name: "boundary parameter single-quoted", s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim",
			ct: "multipart/related; boundary='B'", body: plain}},
		{name: "metadata part after the media", afterFence: true, s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim", ct: mp,
			body: related("B", part("B", "text/plain", "media first"), part("B", "application/json", `{"metadata":{"fencing-token":"999"}}`))}},
		{name: "metadata part naming another object", afterFence: true, s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim", ct: mp,
			body: related("B", part("B", "application/json", `{"name":"own"}`), part("B", "text/plain", "x"))}},
		{name: "multipart over the limit, chunked", afterFence: true, s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim", ct: mp,
			body: related("B", part("B", "application/json", `{"name":"victim"}`), part("B", "text/plain", strings.Repeat("x", gcsBodyLimit)))}},
		// Streamed after the fence (over 64 KiB, the most the gateway
		// holds whole): admitted, then cut; the store keeps nothing of it.
		{name: "streamed multipart, the client gone mid-body", s: gcsShape{method: http.MethodPost, path: up + "multipart&name=victim", ct: mp,
			body: related("B", part("B", "application/json", `{"name":"victim"}`), part("B", "text/plain", strings.Repeat("z", 96<<10)))},
			raw: "client vanishes mid-body, with a length", afterFence: true},
		// Accepted: the store takes a second metadata part as the media
		// (its content), the first is the one stamped.
		{name: "two metadata parts", s: gcsShape{method: http.MethodPost, path: up + "multipart&name=dir%2Fjob", ct: mp,
			body: related("B", part("B", "application/json", `{"name":"dir/job"}`), part("B", "application/json", `{"metadata":{"fencing-token":"999"}}`))},
			object: "dir/job", content: `{"metadata":{"fencing-token":"999"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, high := o.snapshot(t), fence(t, "victim")
			fresh := high + 1 // admitted by the fence, which it would move
			send := func(token int64) (*http.Response, string) {
				s := tc.s
				s.name = tc.name
				if strings.HasPrefix(tc.name, "multipart over the limit") {
					// Sent chunked: a length over the limit is refused
					// unread.
					return o.sendHeaders(t, s, token, nil, true)
				}
				if tc.raw != "" {
					return o.sendRaw(t, s, token, framingNamed(t, tc.raw))
				}
				if tc.ctTwice != "" {
					return o.sendHeaders(t, s, token, http.Header{"Content-Type": {tc.ctTwice}}, false)
				}
				return o.sendAt(t, o.gw, s, token)
			}
			if tc.object != "" {
				resp, body := send(fresh)
				content, meta := o.stored(t, tc.object)
				if resp.StatusCode != http.StatusOK || content != tc.content || meta["fencing-token"] != fmt.Sprint(fresh) {
					t.Fatalf("%s %s; stored %q with stamp %q; want %q stamped %d", resp.Status, body, content, meta["fencing-token"], tc.content, fresh)
				}
				return
			}
			for _, token := range []int64{fresh, oracleLow} {
				resp, body := send(token)
				if resp.StatusCode < 400 {
					t.Errorf("token %d: %s %.300s; want a refusal", token, resp.Status, body)
				}
				if d := stateDiff(snapshotLines(before), snapshotLines(o.snapshot(t))); d != "" {
					t.Errorf("token %d: the store changed (answer %s %.300s):\n%s", token, resp.Status, body, d)
				}
			}
			if h := fence(t, "victim"); h != high && !tc.afterFence {
				t.Errorf("the victim's fence is %d; want %d (refused before the fence)", h, high)
			}
		})
	}
}

// workerRequest is the shape as the worker sends it to the gateway, with
// its key and token.
func (o *gcsOracle) workerRequest(t *testing.T, s gcsShape, token int64) *http.Request {
	t.Helper()
	req, err := s.request(o.gw)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+gcsWorkerKey)
	req.Header.Set("Fencing-Token", fmt.Sprint(token))
	return req
}

// sendHeaders is sendAt to the gateway with headers added to the
// request's own (a second value of a header it has); chunked sends the
// body without a length.
func (o *gcsOracle) sendHeaders(t *testing.T, s gcsShape, token int64, add http.Header, chunked bool) (*http.Response, string) {
	t.Helper()
	req := o.workerRequest(t, s, token)
	for k, vs := range add {
		req.Header[k] = append(req.Header[k], vs...)
	}
	if chunked {
		req.Body, req.ContentLength = struct{ io.ReadCloser }{req.Body}, -1
	}
	resp, err := gcsOracleClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// sendRaw is sendAt to the gateway with the body put on the wire as f
// does; the answer is a 599 with no body when none came.
func (o *gcsOracle) sendRaw(t *testing.T, s gcsShape, token int64, f framing) (*http.Response, string) {
	t.Helper()
	got := exchange(t, o.gw, f, o.workerRequest(t, s, token), []byte(s.body))
	st := 599
	if len(got) > 0 {
		st = got[0]
	}
	return &http.Response{StatusCode: st, Status: fmt.Sprint(st)}, ""
}

// gzipCommented is a gzip stream whose content is inner and whose header
// carries comment (FCOMMENT): a reader that inflates the body reads
// inner, one that does not finds comment among the bytes sent.
func gzipCommented(comment, inner string) []byte {
	var b bytes.Buffer
	b.Write([]byte{0x1f, 0x8b, 8, 0x10, 0, 0, 0, 0, 0, 0xff})
	b.WriteString(comment)
	b.WriteByte(0)
	fw, _ := flate.NewWriter(&b, flate.NoCompression)
	fw.Write([]byte(inner))
	fw.Close()
	binary.Write(&b, binary.LittleEndian, crc32.ChecksumIEEE([]byte(inner)))
	binary.Write(&b, binary.LittleEndian, uint32(len(inner)))
	return b.Bytes()
}
