package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// signedDeleteObjects posts body as a DeleteObjects request to the
// gateway, signed with the worker's key as an SDK would sign it (payload
// hash and Content-MD5 of the exact bytes), and returns the answer.
func (e *s3Env) signedDeleteObjects(t *testing.T, token, body string) (int, string) {
	t.Helper()
	return e.signedDeleteObjectsSent(t, token, body, false)
}

// signedDeleteObjectsSent is signedDeleteObjects, the body sent chunked
// (no Content-Length) if chunked.
func (e *s3Env) signedDeleteObjectsSent(t *testing.T, token, body string, chunked bool) (int, string) {
	t.Helper()
	tok, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	req := s3DeleteObjectsRequest(t, e.GW, tok, []byte(body), nil)
	req.Body = io.NopCloser(strings.NewReader(body))
	if !chunked {
		req.ContentLength = int64(len(body)) // else 0 with a body: a length the client cannot know
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A DeleteObjects body that an XML reader other than
// the gateway's could read as naming other keys (the fenced object) is
// refused as MalformedXML and never reaches S3. "obj" is fenced at token
// 4; the stale token 1 would pass for "fresh" alone. Against VersityGW.
func TestS3DeleteObjectsCraftedBodyRefused(t *testing.T) {
	e := startS3Env(t, "")
	if err := putObject(t, e.worker(tokenOf(4)), "obj", "fenced"); err != nil {
		t.Fatal(err)
	}
	if err := putObject(t, e.worker(tokenOf(1)), "fresh", "fresh"); err != nil {
		t.Fatal(err)
	}
	del := func(inner string) string { return "<Delete><Object>" + inner + "</Object></Delete>" }
	for _, tc := range []struct{ name, body string }{
		{"second key", del("<Key>obj</Key><Key>fresh</Key>")},
		{"second key first", del("<Key>fresh</Key><Key>obj</Key>")},
		{"key after version", del("<Key>obj</Key><VersionId>null</VersionId><Key>fresh</Key>")},
		{"version twice", del("<Key>fresh</Key><VersionId>a</VersionId><VersionId>null</VersionId>")},
		{"child element in key", del("<Key>fresh<x>obj</x></Key>")},
		{"comment in key", del("<Key>ob<!-- -->j</Key>")},
		{"second root", del("<Key>fresh</Key>") + del("<Key>obj</Key>")},
		{"text after root", del("<Key>fresh</Key>") + "obj"},
		{"doctype entity", `<!DOCTYPE Delete [<!ENTITY k "obj">]>` + del("<Key>&k;</Key>")},
		{"foreign namespace key", del(`<Key>fresh</Key><s:Key xmlns:s="urn:x">obj</s:Key>`)},
		{"lower-case key element", del("<Key>fresh</Key><key>obj</key>")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := e.signedDeleteObjects(t, "1", tc.body)
			if st != http.StatusBadRequest || !strings.Contains(body, "<Code>MalformedXML</Code>") {
				t.Fatalf("%d %s; want 400 MalformedXML", st, body)
			}
		})
	}
	if got := e.objectBody(t, "obj"); got != "fenced" {
		t.Fatalf("obj = %q after crafted DeleteObjects; want the fenced object untouched", got)
	}
	if got := e.objectBody(t, "fresh"); got != "fresh" {
		t.Fatalf("fresh = %q; want it untouched (nothing forwarded)", got)
	}

	// The same signing helper gets a plain body through: a stale token is
	// refused by the fence, a current one deletes.
	if st, body := e.signedDeleteObjects(t, "1", del("<Key>obj</Key>")); st != http.StatusConflict {
		t.Fatalf("stale plain DeleteObjects: %d %s; want 409", st, body)
	}
	if st, body := e.signedDeleteObjects(t, "4", `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>obj</Key></Object><Quiet>true</Quiet></Delete>`); st != http.StatusOK {
		t.Fatalf("current DeleteObjects: %d %s", st, body)
	}
	if got := e.objectBody(t, "obj"); got != "<absent>" {
		t.Fatalf("obj = %q after current DeleteObjects; want it deleted", got)
	}
}

// A DeleteObjects body over the route's max_body_bytes is refused 413
// body_too_large in S3's XML error format before the gateway parses it
// (a declared length over the limit is not read at all; a chunked body is
// read up to the limit), before the fence and before VersityGW: both
// objects it names stay, and their fences are not advanced by its newer
// token. Before, the body was read (up to 2 MiB) and parsed first: a body
// S3 would not read one way was answered 400 MalformedXML, and a chunked
// one was admitted (its token 9 advanced the fences, so the holder's own
// token 4 was then refused) and cut while forwarded.
func TestS3DeleteObjectsOverMaxBodyBytes(t *testing.T) {
	const limit = 1000
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	p := startFencegate(t, s3GatewayYAML(s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s")+
		fmt.Sprintf("      max_body_bytes: %d\n", limit)))
	e := &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}
	for _, k := range []string{"obj", "fresh"} {
		if err := putObject(t, e.worker(tokenOf(4)), k, k+" body"); err != nil {
			t.Fatal(err)
		}
	}
	objects := "<Object><Key>obj</Key></Object><Object><Key>fresh</Key></Object>"
	for i := 0; len(objects) <= limit; i++ {
		objects += fmt.Sprintf("<Object><Key>pad/%04d</Key></Object>", i)
	}
	for _, tc := range []struct {
		name, body string
		chunked    bool
	}{
		{"with a length", "<Delete>" + objects + "</Delete>", false},
		{"with a length, read two ways", "<Delete><Object><Key>pad</Key><Key>obj</Key></Object>" + objects + "</Delete>", false},
		{"chunked", "<Delete>" + objects + "</Delete>", true},
		{"chunked, read two ways", "<Delete><Object><Key>pad</Key><Key>obj</Key></Object>" + objects + "</Delete>", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := e.signedDeleteObjectsSent(t, "9", tc.body, tc.chunked)
			if st != http.StatusRequestEntityTooLarge || !strings.Contains(body, "<Code>body_too_large</Code>") {
				t.Fatalf("%d %s; want 413 body_too_large", st, body)
			}
		})
	}
	for _, k := range []string{"obj", "fresh"} {
		if got := e.objectBody(t, k); got != k+" body" {
			t.Errorf("%s = %q after refused DeleteObjects; want it untouched", k, got)
		}
		if h := fenceHighest(t, p.URL("admin"), s3Bucket+"/"+k); h != 4 {
			t.Errorf("the fence of %s is %d after refused DeleteObjects with token 9; want 4", k, h)
		}
	}
	// Within the limit, the holder's token deletes.
	if st, body := e.signedDeleteObjects(t, "4", "<Delete><Object><Key>obj</Key></Object></Delete>"); st != http.StatusOK {
		t.Fatalf("DeleteObjects within the limit: %d %s", st, body)
	}
	if got := e.objectBody(t, "obj"); got != "<absent>" {
		t.Fatalf("obj = %q after DeleteObjects within the limit; want it deleted", got)
	}
}

// fenceHighest is the highest token of resource's fence, read from the
// gateway's admin API (0: no fence).
func fenceHighest(t *testing.T, admin, resource string) int64 {
	t.Helper()
	resp, err := http.Get(admin + "/v1/fences?resource=" + url.QueryEscape(resource))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct{ Highest int64 }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("fence of %s: %s: %v", resource, resp.Status, err)
	}
	return st.Highest
}
