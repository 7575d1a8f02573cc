package azure

import (
	"crypto/tls"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
)

// verifySAS accepts what azblob's sas package signs with the worker's key
// and refuses each check's violation with its own reason: address range,
// protocol, service, resource type, permission, version, encryption scope,
// a service SAS.
func TestVerifyWorkerSAS(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("worker-key-0123456789"))
	cred, err := azblob.NewSharedKeyCredential("worker1", key)
	if err != nil {
		t.Fatal(err)
	}
	wk, _ := newSharedKey("worker1", key)
	other, _ := newSharedKey("worker0", base64.StdEncoding.EncodeToString([]byte("another")))
	clients := map[string]*sharedKey{"worker0": other, "worker1": wk}
	now := time.Now()
	sign := func(mod func(*sas.AccountSignatureValues)) string {
		v := sas.AccountSignatureValues{
			Protocol: sas.ProtocolHTTPSandHTTP, ExpiryTime: now.Add(time.Hour),
			Permissions:   (&sas.AccountPermissions{Read: true, Write: true}).String(),
			ResourceTypes: (&sas.AccountResourceTypes{Object: true}).String(),
		}
		if mod != nil {
			mod(&v)
		}
		q, err := v.SignWithSharedKey(cred)
		if err != nil {
			t.Fatal(err)
		}
		return q.Encode()
	}
	check := func(what, method, path, rawQuery string, tlsOn bool, remote string, want error) {
		t.Helper()
		r := httptest.NewRequest(method, "http://gw.example"+path+"?"+rawQuery, nil)
		r.RemoteAddr = remote
		if method == http.MethodPut && strings.Count(path, "/") > 1 && !strings.Contains(rawQuery, "comp=") {
			r.Header.Set("X-Ms-Blob-Type", "BlockBlob") // Put Blob names its type
		}
		if tlsOn {
			r.TLS = &tls.ConnectionState{}
		}
		tg, ferr := parseTarget(r)
		if ferr != nil {
			t.Fatalf("%s: %v", what, ferr)
		}
		q, _ := url.ParseQuery(rawQuery)
		got, err := verifySAS(r, q, tg, clients, now)
		if err != want || (want == nil && got != "worker1") {
			t.Errorf("%s: verifySAS = %q, %v; want worker1, %v", what, got, err, want)
		}
	}
	const local = "127.0.0.1:4000"
	check("put", http.MethodPut, "/c/b", sign(nil), false, local, nil)
	check("put with comp", http.MethodPut, "/c/b", "comp=metadata&"+sign(nil), false, local, nil)
	check("read", http.MethodGet, "/c/b", sign(nil), false, local, nil)
	check("delete without d", http.MethodDelete, "/c/b", sign(nil), false, local, errSASScope)
	check("container write with srt=o", http.MethodPut, "/c", "restype=container&"+sign(nil), false, local, errSASScope)
	check("list without l", http.MethodGet, "/c", "restype=container&comp=list&"+sign(nil), false, local, errSASScope)
	inRange := sign(func(v *sas.AccountSignatureValues) {
		v.IPRange = sas.IPRange{Start: []byte{127, 0, 0, 1}, End: []byte{127, 0, 0, 9}}
	})
	check("address in range", http.MethodPut, "/c/b", inRange, false, "127.0.0.5:1", nil)
	check("address out of range", http.MethodPut, "/c/b", inRange, false, "127.0.0.10:1", errSASAddress)
	check("IPv6 address", http.MethodPut, "/c/b", inRange, false, "[::1]:1", errSASAddress)
	httpsOnly := sign(func(v *sas.AccountSignatureValues) { v.Protocol = sas.ProtocolHTTPS })
	check("https only over http", http.MethodPut, "/c/b", httpsOnly, false, local, errSASProtocol)
	check("https only over https", http.MethodPut, "/c/b", httpsOnly, true, local, nil)
	check("old version", http.MethodPut, "/c/b", sign(func(v *sas.AccountSignatureValues) { v.Version = "2019-12-12" }), false, local, errSASForm)
	check("encryption scope", http.MethodPut, "/c/b", sign(func(v *sas.AccountSignatureValues) { v.EncryptionScope = "s" }), false, local, errSASForm)
	check("service SAS", http.MethodGet, "/c/b", "sr=b&"+sign(nil), false, local, errSASForm)
	if q := withoutSAS("comp=block&blockid=YQ%3D%3D&" + sign(nil)); q != "blockid=YQ%3D%3D&comp=block" {
		t.Errorf("withoutSAS = %q", q)
	}
}
