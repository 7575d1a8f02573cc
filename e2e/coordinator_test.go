package e2e

// Black-box tests of the lease coordinator in the real binary on a real
// PostgreSQL: seed test 5 (the coordinator killed with SIGKILL and the
// database crashed: token order survives) and the database going away.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/internal/testenv"
)

func coordinatorYAML(dbURL string) string {
	return fmt.Sprintf(`
store:
  postgres: {url: %q, timeout: 2s}
coordinator: {enabled: true, listen: $COORDINATOR}
admin: {listen: ""}
log: {level: warn}
`, dbURL)
}

func coordinatorClient(p *Proc, owner string) *client.Client {
	return &client.Client{URL: p.URL("coordinator"), Owner: owner, HTTPClient: &http.Client{Timeout: 10 * time.Second}}
}

// Seed test 5: every token issued after the coordinator was killed with
// SIGKILL and PostgreSQL crashed (immediate shutdown: no checkpoint, WAL
// recovery) is larger than every token issued before, and a lease granted
// before the crash is still the same lease afterwards.
func TestCoordinatorSeed5KillAndDatabaseCrash(t *testing.T) {
	pg := testenv.PostgresIsolated(t)
	p := startFencegate(t, coordinatorYAML(pg.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	held, err := coordinatorClient(p, "holder").AcquireOnce(ctx, "/orders/held", client.Options{TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Acquirers run while the process is killed: every token answered
	// before the kill counts as issued before.
	var (
		mu     sync.Mutex
		before []int64
		wg     sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := coordinatorClient(p, fmt.Sprintf("worker-%d", w))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := c.AcquireOnce(ctx, fmt.Sprintf("/orders/%d-%d", w, i%5), client.Options{TTL: time.Minute})
				if err == nil {
					mu.Lock()
					before = append(before, r.Token)
					mu.Unlock()
					c.Release(ctx, r.Resource, r.Token)
				}
			}
		}()
	}
	// Killed while they run, once they have 10 tokens (a fixed 500ms
	// gave a loaded machine too few).
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(before) >= 10
	})
	p.Kill9()
	close(stop)
	wg.Wait()
	if len(before) < 10 {
		t.Fatalf("only %d tokens issued before the kill", len(before))
	}
	maxBefore := held.Token
	for _, tok := range before {
		maxBefore = max(maxBefore, tok)
	}

	pg.Restart(t, true)
	p.Restart()

	c := coordinatorClient(p, "after")
	for i := range 20 {
		r, err := c.AcquireOnce(ctx, fmt.Sprintf("/orders/after-%d", i), client.Options{TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire after restart: %v", err)
		}
		if r.Token <= maxBefore {
			t.Errorf("token %d issued after the crash is not above %d issued before", r.Token, maxBefore)
		}
	}
	got, err := c.Show(ctx, "/orders/held")
	if err != nil || !got.Held || got.Owner != "holder" || got.Token != held.Token {
		t.Errorf("lease granted before the crash = %+v, %v; want holder's token %d", got, err, held.Token)
	}
	if _, err := coordinatorClient(p, "holder").Renew(ctx, "/orders/held", held.Token, time.Minute); err != nil {
		t.Errorf("renew of the lease granted before the crash: %v", err)
	}
}

// With the database down the coordinator answers 503 fence_unavailable with
// Retry-After, and serves again by itself once the database is back.
func TestCoordinatorDatabaseDownAnswers503(t *testing.T) {
	pg := testenv.PostgresIsolated(t)
	p := startFencegate(t, coordinatorYAML(pg.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := coordinatorClient(p, "A")
	first, err := c.AcquireOnce(ctx, "/orders/1", client.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	pg.Stop(t)
	_, err = c.AcquireOnce(ctx, "/orders/2", client.Options{TTL: time.Minute})
	var fe *fencegate.Error
	if !errors.As(err, &fe) || httprefusal.Status(fe) != http.StatusServiceUnavailable || fe.Code != fencegate.CodeFenceUnavailable || fe.RetryAfter <= 0 {
		t.Fatalf("acquire with the database down = %v; want 503 fence_unavailable with Retry-After", err)
	}
	if _, err := c.Renew(ctx, "/orders/1", first.Token, time.Minute); !errors.As(err, &fe) || httprefusal.Status(fe) != http.StatusServiceUnavailable {
		t.Errorf("renew with the database down = %v; want 503 (not lease_lost: nothing is known)", err)
	}

	pg.Start(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := c.AcquireOnce(ctx, "/orders/2", client.Options{TTL: time.Minute})
		if err == nil {
			if r.Token <= first.Token {
				t.Errorf("token after the outage %d; want above %d", r.Token, first.Token)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("coordinator did not recover within 30s after the database came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := c.Renew(ctx, "/orders/1", first.Token, time.Minute); err != nil {
		t.Errorf("renew of the lease from before the outage: %v", err)
	}
}
