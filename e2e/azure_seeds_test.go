package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

// Seed test 2 on Azure with `precondition: etag`: A's Put Blob is handed
// to the store but delayed in the network (toxiproxy) past the gateway's
// timeout; B then writes with a newer token. When A's request reaches the
// store it carries If-Match on the ETag B replaced, and the store refuses
// it. Without the precondition the same timing lets A overwrite B.
func TestAzurePreconditionDelayedForward(t *testing.T) {
	for _, tc := range []struct {
		precondition string
		want         string
	}{
		{"etag", "B"},
		{"none", "A-late"}, // control: shows the test can fail
	} {
		t.Run(tc.precondition, func(t *testing.T) {
			srv := testenv.Azurite(t)
			srv.CreateContainer(t, azContainer)
			tp := testenv.Toxiproxy(t)
			hostPort, account, _ := strings.Cut(strings.TrimPrefix(srv.Endpoint, "http://"), "/")
			proxy := tp.Proxy(t, "azurite", hostPort)
			// Two routes to one container and one fence: requests to
			// "localhost" go through the delaying proxy.
			p := startFencegate(t, s3GatewayYAML(
				azRouteYAML("slow", "localhost", "http://"+proxy.Listen+"/"+account, tc.precondition, "1s"),
				azRouteYAML("fast", "", srv.Endpoint, tc.precondition, "30s")))
			gw := p.URL("gateway")
			e := &azEnv{Az: srv, Proc: p, GW: gw}
			if err := azPut(azWorker(t, gw, tokenOf(1).Load), "job", "A-first"); err != nil {
				t.Fatalf("A's first write: %v", err)
			}
			proxy.AddToxic(t, testenv.Toxic{Name: "delay", Type: "latency", Stream: "upstream",
				Attributes: map[string]any{"latency": 3000}})
			sent := time.Now()
			err := azPut(azWorker(t, strings.Replace(gw, "127.0.0.1", "localhost", 1), tokenOf(1).Load), "job", "A-late")
			var re *azcore.ResponseError
			if !errors.As(err, &re) || re.StatusCode != http.StatusGatewayTimeout {
				t.Fatalf("A's delayed write: %v; want 504 upstream_timeout", err)
			}
			if err := azPut(azWorker(t, gw, tokenOf(2).Load), "job", "B"); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			time.Sleep(time.Until(sent.Add(5 * time.Second)))
			if got, _ := e.stored(t, "job"); got != tc.want {
				t.Fatalf("blob = %q; want %q", got, tc.want)
			}
		})
	}
}

// A write that bypassed the gateway makes its next write under
// `precondition: etag` fail with precondition_failed: the bypassing
// version is not overwritten blindly.
func TestAzurePreconditionDetectsBypass(t *testing.T) {
	e := startAzEnv(t, "etag")
	if err := azPut(e.worker(t, tokenOf(1)), "job", "mine"); err != nil {
		t.Fatal(err)
	}
	if err := azPut(e.direct(t), "job", "bypass"); err != nil {
		t.Fatal(err)
	}
	err := azPut(e.worker(t, tokenOf(1)), "job", "mine-again")
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionFailed || re.ErrorCode != "precondition_failed" {
		t.Fatalf("write after a bypass: %v; want 412 precondition_failed", err)
	}
	if got, _ := e.stored(t, "job"); got != "bypass" {
		t.Fatalf("blob = %q; want the bypassing version kept", got)
	}
	// A new blob: If-None-Match: *, created once.
	if err := azPut(e.worker(t, tokenOf(1)), "fresh", "new"); err != nil {
		t.Fatalf("create: %v", err)
	}
}

// fencegate doctor runs the If-Match racing probe against the store of
// each Azure route: Azurite passes; a store that ignores the conditions
// fails it.
func TestAzureDoctor(t *testing.T) {
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, azContainer)
	ignoring := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"0x8D0000000000001"`)
		switch r.Method {
		case http.MethodPut:
			w.WriteHeader(http.StatusCreated)
		case http.MethodDelete:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(ignoring.Close)
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
	for _, tc := range []struct {
		name, endpoint string
		wantExit       int
		wantOut        string
	}{
		{"azurite", srv.Endpoint, 0, "honours If-Match and If-None-Match"},
		{"azurite reads bodies", srv.Endpoint, 0, "reads a write's body (or closes the connection) before its next request"},
		{"ignores conditions", ignoring.URL + "/" + testenv.AzuriteAccount, 1, "FAIL"},
		// Azure routes keep their connections across writes: a store that
		// takes an unread body for a request fails the route.
		{"answers unread", startEarlyUpstream(t) + "/" + testenv.AzuriteAccount, 1, "answers a write without reading its body and takes the body for a request of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
			y := strings.ReplaceAll(s3GatewayYAML(azRouteYAML("blobs", "", tc.endpoint, "etag", "5s")), "$GATEWAY", "127.0.0.1:1")
			y = strings.ReplaceAll(y, "$DIR", t.TempDir())
			y = strings.ReplaceAll(y, "$ADMIN", "127.0.0.1:2")
			if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "doctor", "-c", cfg, "--container", azContainer).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantExit || !strings.Contains(string(out), tc.wantOut) {
				t.Fatalf("doctor exit %d; want %d with %q:\n%s", code, tc.wantExit, tc.wantOut, out)
			}
		})
	}
}
