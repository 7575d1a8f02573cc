package e2e

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// signedDeleteObjects posts body as a DeleteObjects request to the
// gateway, signed with the worker's key as an SDK would sign it (payload
// hash and Content-MD5 of the exact bytes), and returns the answer.
func (e *s3Env) signedDeleteObjects(t *testing.T, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", e.GW+"/"+s3Bucket+"?delete=", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	md := md5.Sum([]byte(body))
	req.Header.Set("Content-Type", "application/xml")
	req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(md[:]))
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req.Header.Set("Fencing-Token", token)
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: s3WorkerKey, SecretAccessKey: s3WorkerSecret},
		req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
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
