package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The stale-owner seed tests that involve the coordinator (3, 4, 5, 6 and
// 8 of docs/design.md §8), on an Azure route with precondition: etag whose
// resource keys are the leases' names, each checked on the blob Azurite
// stores. The coordinator shares the gateway's store, so a newer lease
// fences the older token from the moment it is issued.
func TestAzureSeedsWithCoordinator(t *testing.T) {
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, azContainer)
	p := startFencegate(t, s3GatewayYAML(azRouteYAML("blobs", "", srv.Endpoint, "etag", "30s"))+
		"coordinator: {enabled: true, listen: $COORDINATOR}\n")
	e := &azEnv{Az: srv, Proc: p, GW: p.URL("gateway")}
	coord := p.URL("coordinator")
	lease := func(blob string) string { return azContainer + "/" + blob }
	tp := testenv.Toxiproxy(t)
	store := seedStore{
		put: func(t *testing.T, token int64, blob, body string) error {
			return azPut(e.worker(t, tokenOf(token)), blob, body)
		},
		stale: wantAzStale, stored: e.stored,
	}

	// 3: renew and release after expiry do not change B's ownership.
	t.Run("seed3 late renew and release", func(t *testing.T) {
		a := acquireTTL(t, coord, lease("s3"), "A", "1s")
		if err := azPut(e.worker(t, tokenOf(a)), "s3", "A"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		b := acquire(t, coord, lease("s3"), "B")
		st, body := call(t, "POST", coord+"/v1/leases/renew", fmt.Sprintf(`{"resource":%q,"owner":"A","token":%d,"ttl":"1m"}`, lease("s3"), a), jsonCT)
		if st != http.StatusConflict || !strings.Contains(body, "lease_lost") {
			t.Fatalf("A's late renew: %d %s; want 409 lease_lost", st, body)
		}
		st, body = call(t, "POST", coord+"/v1/leases/release", fmt.Sprintf(`{"resource":%q,"owner":"A","token":%d}`, lease("s3"), a), jsonCT)
		if st != http.StatusOK || !strings.Contains(body, `"released":false`) {
			t.Fatalf("A's late release: %d %s; want released false", st, body)
		}
		wantAzStale(t, "A after its late renew", azPut(e.worker(t, tokenOf(a)), "s3", "A-late"))
		if err := azPut(e.worker(t, tokenOf(b)), "s3", "B"); err != nil {
			t.Fatalf("B's write after A's late renew and release: %v", err)
		}
		if got, stamp := e.stored(t, "s3"); got != "B" || stamp != fmt.Sprint(b) {
			t.Fatalf("stored %q stamp %q; want B stamped %d", got, stamp, b)
		}
	})

	// 4: an acquisition aborted after its token was drawn grants no
	// authority (seedAbortedAcquisition).
	t.Run("seed4 aborted acquisition", func(t *testing.T) {
		seedAbortedAcquisition(t, tp, coord, lease("s4"), "s4", store)
	})

	// 5: token order survives a restart of the coordinator (the same
	// process as the gateway here, on its durable store).
	t.Run("seed5 restart", func(t *testing.T) {
		a := acquire(t, coord, lease("s5"), "A")
		if err := azPut(e.worker(t, tokenOf(a)), "s5", "A"); err != nil {
			t.Fatal(err)
		}
		release(t, coord, lease("s5"), "A", a)
		p.Restart()
		e.GW, coord = p.URL("gateway"), p.URL("coordinator")
		b := acquire(t, coord, lease("s5"), "B")
		if b <= a {
			t.Fatalf("token after restart %d; want > %d", b, a)
		}
		wantAzStale(t, "A after the restart", azPut(e.worker(t, tokenOf(a)), "s5", "A-late"))
		if err := azPut(e.worker(t, tokenOf(b)), "s5", "B"); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.stored(t, "s5"); got != "B" {
			t.Fatalf("stored %q; want B", got)
		}
	})

	// 6: concurrent writes with one token are one owner's: all are
	// admitted, the store keeps one of them whole (last writer wins; the
	// owner orders its own writes), stamped with that token.
	t.Run("seed6 same token", func(t *testing.T) {
		a := acquire(t, coord, lease("s6"), "A")
		var wg sync.WaitGroup
		errs := make([]error, 6)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = azPut(e.worker(t, tokenOf(a)), "s6", fmt.Sprintf("body-%d-%s", i, strings.Repeat("x", 1000)))
			}()
		}
		wg.Wait()
		for i, err := range errs {
			var re *azcore.ResponseError
			// With precondition etag two writes of one token may race on
			// one ETag: the loser is refused 412, never applied on top of
			// the winner unseen.
			if err != nil && !(errors.As(err, &re) && re.StatusCode == http.StatusPreconditionFailed) {
				t.Errorf("write %d: %v", i, err)
			}
		}
		got, stamp := e.stored(t, "s6")
		if !strings.HasPrefix(got, "body-") || len(got) != len("body-0-")+1000 || stamp != fmt.Sprint(a) {
			t.Fatalf("stored %.12q (%d bytes) stamp %q; want one whole body stamped %d", got, len(got), stamp, a)
		}
	})

	// 8: A is cut off from the coordinator (its own link, through
	// toxiproxy) while its link to the gateway stays up (seedCutOff).
	t.Run("seed8 cut off from the coordinator", func(t *testing.T) {
		seedCutOff(t, tp, coord, lease("s8"), "s8", store)
	})
}
