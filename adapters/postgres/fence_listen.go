package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// listen keeps the replica's drain listener up until the fence is closed:
// one connection that LISTENs on drainChannel and lets this replica's idle
// markers of a notified key go at once (docs/design.md §4, sticky markers).
// Markers stay idle only while it is up; when it is lost, every idle marker
// goes.
func (f *SharedFence) listen() {
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-f.closing:
			return
		default:
		}
		err := f.listenOnce()
		if f.listenGen.Load()%2 == 1 {
			f.listenGen.Add(1)
			for _, l := range f.lanes {
				l.dropIdle(time.Time{})
			}
			backoff = 50 * time.Millisecond
		}
		if err == nil {
			return // closing
		}
		f.log.Debug("drain listener down; markers are let go after each write until it is back", "err", err)
		select {
		case <-f.closing:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// listenOnce runs one listener connection until it fails (an error) or the
// fence is closed (nil).
func (f *SharedFence) listenOnce() error {
	ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
	conn, err := pgx.ConnectConfig(ctx, f.connConfig.Copy())
	if err != nil {
		cancel()
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "LISTEN "+drainChannel)
	cancel()
	if err != nil {
		return err
	}
	// Up from here: a notification committed from now on reaches conn.
	f.listenGen.Add(1)
	for {
		select {
		case <-f.closing:
			return nil
		default:
		}
		wctx, wcancel := context.WithTimeout(context.Background(), heartbeatEvery)
		done := make(chan struct{})
		go func() {
			select {
			case <-f.closing:
				wcancel()
			case <-done:
			}
		}()
		n, err := conn.WaitForNotification(wctx)
		close(done)
		wcancel()
		if err != nil {
			select {
			case <-f.closing:
				return nil
			default:
			}
			if !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed() {
				return err
			}
			// A quiet second: check the link is still there.
			hctx, hcancel := context.WithTimeout(context.Background(), f.storeTimeout)
			_, err = conn.Exec(hctx, "SELECT 1")
			hcancel()
			if err != nil {
				return err
			}
			continue
		}
		k, t, ok := strings.Cut(n.Payload, " ")
		key, err1 := strconv.ParseInt(k, 10, 64)
		token, err2 := strconv.ParseInt(t, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		f.lane(key).drained(key, token)
	}
}
