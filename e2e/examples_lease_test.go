package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestExamplePythonWorkerLosesLease: examples/python/requests_worker.py
// holds a 2 s lease and writes the values it reads from stdin. Its lease
// is lost while it runs, in two ways: the coordinator cannot be reached
// (its renewals fail until the lease expires), or the worker is paused
// (SIGSTOP) past its TTL. Another worker then takes the lease and writes.
// Given one more value, the worker stops with exit 4 before writing it,
// and the upstream's history holds its write from before the loss and the
// new owner's, nothing else.
func TestExamplePythonWorkerLosesLease(t *testing.T) {
	needPython(t, "requests")
	for _, how := range []string{"coordinator unreachable", "paused past its TTL"} {
		t.Run(how, func(t *testing.T) {
			rec, up := newUpstream(t)
			p := startFencegate(t, leaseRunYAML(up))
			// The worker reaches the coordinator through a proxy that the
			// test can turn into a wall of 503s.
			target, err := url.Parse(p.URL("coordinator"))
			if err != nil {
				t.Fatal(err)
			}
			var down atomic.Bool
			rp := httputil.NewSingleHostReverseProxy(target)
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if down.Load() {
					http.Error(w, "unreachable", http.StatusServiceUnavailable)
					return
				}
				rp.ServeHTTP(w, r)
			}))
			t.Cleanup(proxy.Close)

			const res = "/orders/lost"
			root, err := testenv.RepoRoot()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(systemPython, filepath.Join(root, "examples/python/requests_worker.py"), res, "-")
			cmd.Env = append(cmd.Environ(), "FENCEGATE_COORDINATOR="+proxy.URL, "FENCEGATE_URL="+p.URL("gateway"),
				"FENCEGATE_OWNER=py-worker", "FENCEGATE_TTL=2", "FENCING_TOKEN=")
			var out testenv.LogBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			var waitErr error
			go func() { waitErr = cmd.Wait(); close(exited) }()
			t.Cleanup(func() {
				cmd.Process.Signal(syscall.SIGCONT)
				cmd.Process.Kill()
				<-exited
			})

			io.WriteString(stdin, "before\n")
			deadline := time.Now().Add(20 * time.Second)
			for v, _ := rec.Get(res); v != "before"; v, _ = rec.Get(res) {
				if time.Now().After(deadline) {
					t.Fatalf("the worker's first write never reached the upstream:\n%s", out.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			old := rec.HistoryOf(res)[0].Token

			switch how {
			case "coordinator unreachable":
				down.Store(true)
			case "paused past its TTL":
				if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
			}
			// The new owner waits for the worker's lease to expire.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := coordinatorClient(p, "new-owner").Acquire(ctx, res, client.Options{TTL: time.Minute, Wait: 25 * time.Second})
			if err != nil {
				t.Fatalf("the new owner did not get the lease: %v\n%s", err, out.String())
			}
			t.Cleanup(func() { l.Close() })
			req, _ := http.NewRequest("PUT", p.URL("gateway")+res, strings.NewReader("new-owner"))
			req.Header.Set("Fencing-Token", fmt.Sprint(l.Token))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Fatalf("the new owner's write: %d", resp.StatusCode)
			}

			cmd.Process.Signal(syscall.SIGCONT)
			io.WriteString(stdin, "after\n")
			stdin.Close()
			select {
			case <-exited:
				code := -1
				if ee, ok := waitErr.(*exec.ExitError); ok {
					code = ee.ExitCode()
				}
				if code != 4 || !strings.Contains(out.String(), "stopping") {
					t.Errorf("worker exit %d (%v); want 4, lease lost:\n%s", code, waitErr, out.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the worker did not stop:\n%s", out.String())
			}
			want := fmt.Sprintf("PUT before@%s, PUT new-owner@%d", old, l.Token)
			if got := applied(rec, res); got != want {
				t.Errorf("upstream applied %q; want %q (nothing from the worker after its lease was lost)", got, want)
			}
		})
	}
}
