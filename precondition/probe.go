package precondition

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ErrNoProtection is the probe's verdict on an upstream whose conditional
// writes cannot be relied on: it ignores the condition, or lets more than
// one of several racing conditional writes win.
var ErrNoProtection = errors.New("precondition: etag gives no protection on this upstream")

// ProbeTarget is one probe object on an upstream, written with the
// gateway's credentials.
type ProbeTarget interface {
	// Put writes body to the probe object conditional on ifMatch (a quoted
	// entity-tag), or with ifMatch "" on If-None-Match: *, and returns the
	// answer's status and ETag header.
	Put(ctx context.Context, body, ifMatch string) (status int, etag string, err error)
	// Head returns the probe object's ETag header ("" if it does not exist).
	Head(ctx context.Context) (string, error)
}

// ProbeWriters is how many conditional writes the probe races by default.
const ProbeWriters = 16

// ProbeTimeout bounds one run of the racing probe (serve at start, doctor).
const ProbeTimeout = 30 * time.Second

// Probe races n conditional writes (n <= 1: ProbeWriters) to one absent
// probe object, then n to the version one of them created: exactly one of
// each round may win, the others must be refused with 412 (or 409, which
// AWS answers to a conditional write racing another). A write on a wrong
// ETag must be refused too. Any other outcome is ErrNoProtection, with what
// happened: a store that checks the condition and writes in two steps lets
// several win, which a one-at-a-time check never shows.
func Probe(ctx context.Context, t ProbeTarget, n int) error {
	if n <= 1 {
		n = ProbeWriters
	}
	won, etag, err := race(ctx, t, n, "")
	if err != nil {
		return err
	}
	if won != 1 {
		return fmt.Errorf("%w: %d of %d concurrent writes with If-None-Match: * to an absent object succeeded, want exactly 1", ErrNoProtection, won, n)
	}
	if etag, err = strongETag(ctx, t, etag); err != nil {
		return err
	}
	if st, _, err := t.Put(ctx, "wrong", `"fencegate-probe-wrong-etag"`); err != nil {
		return err
	} else if st != http.StatusPreconditionFailed {
		return fmt.Errorf("%w: a write with If-Match on a wrong ETag answered %d, want 412 (the condition is ignored)", ErrNoProtection, st)
	}
	won, _, err = race(ctx, t, n, `"`+etag+`"`)
	if err != nil {
		return err
	}
	switch {
	case won == 0:
		return fmt.Errorf("no write with If-Match on the current ETag %q succeeded: precondition: etag would refuse every write on this upstream", etag)
	case won > 1:
		return fmt.Errorf("%w: %d of %d concurrent writes with If-Match on the same ETag succeeded, want exactly 1", ErrNoProtection, won, n)
	}
	return nil
}

// race sends n conditional writes at once and counts the winners; etag is
// the winner's answer's (normalized).
func race(ctx context.Context, t ProbeTarget, n int, ifMatch string) (won int, etag string, err error) {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Each round's bodies differ from the last round's: a store
			// with content-derived ETags (MD5) would otherwise give a
			// winner of this round the ETag of the last one, and a second
			// writer would rightly match it.
			st, e, err := t.Put(ctx, fmt.Sprintf("fencegate probe writer %d (%s)", i, ifMatch), ifMatch)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case st >= 200 && st < 300:
				won++
				etag = Normalize(e)
			case st == http.StatusPreconditionFailed || st == http.StatusConflict:
			default:
				errs = append(errs, fmt.Errorf("probe write answered %d", st))
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		return 0, "", fmt.Errorf("probe: %w", errors.Join(errs...))
	}
	return won, etag, nil
}

// strongETag returns the probe object's strong ETag: the winner's answer's,
// or a HEAD's, polled while weak (Apache, for a second after a write).
func strongETag(ctx context.Context, t ProbeTarget, etag string) (string, error) {
	deadline := time.Now().Add(5 * time.Second)
	for etag == "" || isWeak(etag) {
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the upstream served no strong ETag for the probe object within 5s (got %q): If-Match never matches a weak one", etag)
		}
		h, err := t.Head(ctx)
		if err != nil {
			return "", fmt.Errorf("probe HEAD: %w", err)
		}
		if etag = Normalize(h); etag == "" || isWeak(etag) {
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return "", err
			}
		}
	}
	return strings.TrimPrefix(etag, "W/"), nil
}
