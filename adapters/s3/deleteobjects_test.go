package s3

import (
	"bytes"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

const s3NS = `xmlns="http://s3.amazonaws.com/doc/2006-03-01/"`

func TestParseDeleteObjectsAccepts(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		keys       []string
	}{
		{"sdk", `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<Delete ` + s3NS + `><Object><Key>a/b</Key></Object><Object><Key>c</Key><VersionId>v1</VersionId></Object><Quiet>true</Quiet></Delete>`, []string{"a/b", "c"}},
		{"no namespace", `<Delete><Quiet>false</Quiet><Object><Key>k</Key></Object></Delete>`, []string{"k"}},
		{"whitespace", "\n  <Delete>\n\t<Object>\n  <Key>k</Key>\n </Object>\r\n</Delete>\n\n", []string{"k"}},
		{"entities", `<Delete><Object><Key>a&amp;b&#x20;&lt;c&gt;</Key></Object></Delete>`, []string{"a&b <c>"}},
		{"cdata joined", `<Delete><Object><Key>ab<![CDATA[<c>]]>d</Key></Object></Delete>`, []string{"ab<c>d"}},
		{"conditional fields", `<Delete><Object><Key>k</Key><ETag>"e"</ETag><LastModifiedTime>2026-01-01T00:00:00Z</LastModifiedTime><Size>3</Size></Object></Delete>`, []string{"k"}},
		{"same key twice in two objects", `<Delete><Object><Key>k</Key></Object><Object><Key>k</Key></Object></Delete>`, []string{"k", "k"}},
		{"spaces in key kept", `<Delete><Object><Key> k </Key></Object></Delete>`, []string{" k "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDeleteObjects([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.keys) {
				t.Fatalf("got %q; want %q", got, tc.keys)
			}
		})
	}
}

// Every body here is one that another XML reader could understand as
// naming other objects than the gateway fenced, or that S3 does not define.
func TestParseDeleteObjectsRefuses(t *testing.T) {
	obj := func(inner string) string { return "<Delete><Object>" + inner + "</Object></Delete>" }
	for _, tc := range []struct{ name, body, errSub string }{
		{"second key", obj("<Key>obj</Key><Key>fresh</Key>"), "<Key> given twice"},
		{"second key after version", obj("<Key>obj</Key><VersionId>v</VersionId><Key>fresh</Key>"), "<Key> given twice"},
		{"version twice", obj("<Key>obj</Key><VersionId>a</VersionId><VersionId>b</VersionId>"), "<VersionId> given twice"},
		{"etag twice", obj("<Key>obj</Key><ETag>a</ETag><ETag>b</ETag>"), "<ETag> given twice"},
		{"quiet twice", "<Delete><Quiet>true</Quiet><Quiet>false</Quiet><Object><Key>k</Key></Object></Delete>", "<Quiet> given twice"},
		{"no key", obj("<VersionId>v</VersionId>"), "without a <Key>"},
		{"empty key", obj("<Key></Key>"), "without a <Key>"},
		{"child element in key", obj("<Key>obj<b>fresh</b></Key>"), "text only"},
		{"empty child in key", obj("<Key>ob<x/>j</Key>"), "text only"},
		{"comment in key", obj("<Key>ob<!-- x -->j</Key>"), "comments"},
		{"comment between", "<Delete><!-- x --><Object><Key>k</Key></Object></Delete>", "comments"},
		{"pi in key", obj("<Key>ob<?p x?>j</Key>"), "processing instructions"},
		{"late xml decl", " <?xml version=\"1.0\"?><Delete><Object><Key>k</Key></Object></Delete>", ""},
		{"doctype entity", `<!DOCTYPE Delete [<!ENTITY k "fresh">]><Delete><Object><Key>&k;</Key></Object></Delete>`, "directives"},
		{"unknown entity", obj("<Key>&k;</Key>"), "well-formed"},
		{"content after root", obj("<Key>obj</Key>") + "<Delete><Object><Key>fresh</Key></Object></Delete>", "after </Delete>"},
		{"text after root", obj("<Key>obj</Key>") + "x", "after </Delete>"},
		{"comment after root", obj("<Key>obj</Key>") + "<!-- -->", "comments"},
		{"text before root", "x" + obj("<Key>obj</Key>"), "root element"},
		{"bom", "\ufeff" + obj("<Key>obj</Key>"), "root element"},
		{"wrong root", "<Deletes><Object><Key>k</Key></Object></Deletes>", "root element"},
		{"unknown in object", obj("<Key>k</Key><key>fresh</key>"), "unknown element"},
		{"unknown in delete", "<Delete><Objects><Key>k</Key></Objects><Object><Key>k</Key></Object></Delete>", "unknown element"},
		{"nested object", "<Delete><Object><Object><Key>k</Key></Object></Object></Delete>", "unknown element"},
		{"text in object", obj("fresh<Key>k</Key>"), "text directly"},
		{"text in delete", "<Delete>fresh<Object><Key>k</Key></Object></Delete>", "text directly"},
		{"foreign namespace", `<Delete><Object><Key xmlns="urn:x">k</Key></Object></Delete>`, "namespace"},
		{"foreign root namespace", `<Delete xmlns="urn:x"><Object><Key>k</Key></Object></Delete>`, "namespace"},
		{"prefixed key", `<Delete xmlns:s="http://s3.amazonaws.com/doc/2006-03-01/"><Object><s:Key>k</s:Key></Object></Delete>`, "attribute"},
		{"undeclared prefix", `<Delete><Object><s:Key>k</s:Key></Object></Delete>`, "namespace"},
		{"attribute on root", `<Delete id="1"><Object><Key>k</Key></Object></Delete>`, "attribute"},
		{"xmlns twice", `<Delete ` + s3NS + ` ` + s3NS + `><Object><Key>k</Key></Object></Delete>`, ""},
		{"attribute on key", obj(`<Key a="fresh">k</Key>`), "attribute"},
		{"unclosed", "<Delete><Object><Key>k</Key></Object>", ""},
		{"mismatched", "<Delete><Object><Key>k</Object></Key></Delete>", "well-formed"},
		{"no objects", "<Delete></Delete>", "no <Object>"},
		{"empty", "", "no <Delete>"},
		{"latin1", `<?xml version="1.0" encoding="ISO-8859-1"?><Delete><Object><Key>k</Key></Object></Delete>`, ""},
		{"too many", "<Delete>" + strings.Repeat("<Object><Key>k</Key></Object>", 1001) + "</Delete>", "more than 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDeleteObjects([]byte(tc.body))
			if err == nil {
				t.Fatalf("accepted with keys %q; want MalformedXML", got)
			}
			if err.Code != "MalformedXML" || err.Status != http.StatusBadRequest || !strings.Contains(err.Message, tc.errSub) {
				t.Fatalf("got %v; want 400 MalformedXML containing %q", err, tc.errSub)
			}
		})
	}
}

// The request-level checks: the size bound, aws-chunked in any spelling,
// key rules, and the body left on the request byte for byte.
func TestDeleteObjectKeys(t *testing.T) {
	req := func(body string, hdr ...string) *http.Request {
		r := httptest.NewRequest("POST", "/b1k?delete", strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return r
	}
	good := "<Delete><Object><Key>a/b</Key></Object></Delete>"
	r := req(good)
	d, err := readDeleteObjects(r)
	if err != nil || !slices.Equal(d.keys, []string{"a/b"}) {
		t.Fatalf("got %+v, %v", d, err)
	}
	var fwd bytes.Buffer
	fwd.ReadFrom(r.Body)
	if fwd.String() != good {
		t.Fatalf("forwarded body %q; want the original bytes", fwd.String())
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		code string
	}{
		{"too large", req("<Delete>" + strings.Repeat(" ", maxDeleteBody) + "<Object><Key>k</Key></Object></Delete>"), "MalformedXML"},
		{"aws-chunked", req(good, "Content-Encoding", "AWS-Chunked"), "NotImplemented"},
		{"aws-chunked second header", req(good, "Content-Encoding", "identity", "Content-Encoding", "aws-chunked"), "NotImplemented"},
		{"dot-dot key", req("<Delete><Object><Key>a/../b</Key></Object></Delete>"), "InvalidArgument"},
		{"control char reference", req("<Delete><Object><Key>a&#1;b</Key></Object></Delete>"), "MalformedXML"},
		{"tab key", req("<Delete><Object><Key>a&#9;b</Key></Object></Delete>"), "InvalidArgument"},
		{"CR key", req("<Delete><Object><Key>a&#13;b</Key></Object></Delete>"), "InvalidArgument"},
		{"leading slash key", req("<Delete><Object><Key>/b</Key></Object></Delete>"), "InvalidArgument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := readDeleteObjects(tc.r); err == nil || err.Code != tc.code {
				t.Fatalf("got %+v, %v; want %s", d, err, tc.code)
			}
		})
	}
}

// parseDeleteObjects is the keys of a DeleteObjects body as parseDeleteDoc
// reads them: XML text, entities decoded, not yet checked as object keys.
func parseDeleteObjects(body []byte) ([]string, *s3Error) {
	doc, err := parseDeleteDoc(body)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(doc.objects))
	for i, o := range doc.objects {
		keys[i] = o.fields["Key"]
	}
	return keys, nil
}

// FuzzParseDeleteObjects checks that the parser never panics and that a
// body it accepts names the same keys to encoding/xml's lenient reader
// (which keeps every <Key> it finds): one per <Object>, equal to ours.
func FuzzParseDeleteObjects(f *testing.F) {
	for _, s := range []string{
		`<Delete ` + s3NS + `><Object><Key>a/b</Key></Object><Quiet>true</Quiet></Delete>`,
		`<?xml version="1.0"?><Delete><Object><Key>a&amp;b</Key><VersionId>v</VersionId></Object></Delete>`,
		`<Delete><Object><Key>obj</Key><Key>fresh</Key></Object></Delete>`,
		`<Delete><Object><Key>ob<![CDATA[j]]></Key></Object></Delete> `,
		`<Delete><Object><Key>o<x/>bj</Key></Object></Delete><Delete/>`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := parseDeleteObjects(body)
		if err != nil {
			return
		}
		var doc struct {
			XMLName xml.Name `xml:"Delete"`
			Objects []struct {
				Keys []string `xml:"Key"`
			} `xml:"Object"`
		}
		if uerr := xml.Unmarshal(body, &doc); uerr != nil {
			t.Fatalf("accepted %q (keys %q) but encoding/xml refuses it: %v", body, keys, uerr)
		}
		if len(doc.Objects) != len(keys) {
			t.Fatalf("%q: %d keys; encoding/xml sees %d objects", body, len(keys), len(doc.Objects))
		}
		for i, o := range doc.Objects {
			if len(o.Keys) != 1 || o.Keys[0] != keys[i] {
				t.Fatalf("%q: object %d key %q; encoding/xml sees %q", body, i, keys[i], o.Keys)
			}
		}
	})
}
