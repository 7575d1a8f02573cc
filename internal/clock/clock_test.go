package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/clock"
)

func TestSleep(t *testing.T) {
	if err := clock.Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
	if err := clock.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep(1ms) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := clock.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context = %v; want context.Canceled", err)
	}
}
