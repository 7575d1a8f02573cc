package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The gateway may hold a SAS instead of the account's key (azure.sas): it
// appends it to its forwards, which Azurite authorizes; workers still sign
// with their own keys, and stale writes are still refused.
func TestAzureGatewaySAS(t *testing.T) {
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, azContainer)
	cred, err := azblob.NewSharedKeyCredential(srv.Account, srv.Key)
	if err != nil {
		t.Fatal(err)
	}
	q, err := sas.AccountSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour),
		Permissions:   (&sas.AccountPermissions{Read: true, Write: true, Create: true, Delete: true, Add: true, List: true}).String(),
		ResourceTypes: (&sas.AccountResourceTypes{Service: true, Container: true, Object: true}).String(),
	}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	route := azRouteYAML("blobs", "", srv.Endpoint, "etag", "30s")
	route = strings.Replace(route, "        account_name: "+srv.Account+"\n        account_key: "+srv.Key+"\n",
		"        sas: \""+q.Encode()+"\"\n", 1)
	if !strings.Contains(route, "sas:") {
		t.Fatalf("route without sas:\n%s", route)
	}
	p := startFencegate(t, s3GatewayYAML(route))
	e := &azEnv{Az: srv, Proc: p, GW: p.URL("gateway")}
	if err := azPut(e.worker(t, tokenOf(2)), "dir/sas", "B"); err != nil {
		t.Fatalf("write through a gateway holding a SAS: %v", err)
	}
	wantAzStale(t, "an older token", azPut(e.worker(t, tokenOf(1)), "dir/sas", "A"))
	if got, stamp := e.stored(t, "dir/sas"); got != "B" || stamp != "2" {
		t.Fatalf("stored %q stamp %q; want B stamped 2", got, stamp)
	}
}
