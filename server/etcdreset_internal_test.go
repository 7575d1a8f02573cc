package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
)

// racingSource is a lock service whose holder of `to` releases the lock
// right after it vouched for it the first time, and a newer holder (its
// token above the fence) writes: every later answer refuses `to`.
type racingSource struct {
	calls int
	race  func()
}

func (s *racingSource) VerifyToken(ctx context.Context, res string, token int64) error {
	s.calls++
	if s.calls == 1 {
		s.race()
		return nil
	}
	return gateway.NotLockHolder(res, token, "the lock was released")
}
func (s *racingSource) Ping(context.Context) error { return nil }
func (s *racingSource) Close() error               { return nil }

// TestEtcdResetVouchedWhenLowered: `fence reset` on store.etcd lowers a
// fence only while the lock service vouches for the new value. Here the
// holder of 7 releases the lock between the service's answer and the
// lowering, and the next holder's write advances the fence to 60: the
// reset is refused and the record in etcd keeps 60 (lowered to 7, the
// released holder's late write would land after the newer one's).
func TestEtcdResetVouchedWhenLowered(t *testing.T) {
	cluster := testenv.Etcd(t, 1)
	st, err := etcd.OpenStore(etcd.StoreOptions{Client: etcd.ClientOptions{Endpoints: cluster.Endpoints}, Prefix: "/fg"})
	if err != nil {
		t.Fatal(err)
	}
	f := etcd.NewSharedFence(st, etcd.SharedFenceOptions{LeaseTTL: 2 * time.Second, ForwardTimeout: 2 * time.Second, DrainTimeout: 10 * time.Second,
		MarkerIdle: 50 * time.Millisecond, MarkerLinger: -1})
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	const res = "/orders/7"
	admit := func(token int64) {
		t.Helper()
		p, err := f.Admit(ctx, gateway.Write{Resource: res, Token: token})
		if err != nil {
			t.Fatalf("write of %d: %v", token, err)
		}
		p.Release()
	}
	admit(50) // the mistaken fence, above the holder's 7

	cfg, err := config.Parse("etcd.yaml", []byte(strings.Replace(etcdOrdersYAML, "%s",
		"      hierarchical: false\n      token_source:\n        etcd: {endpoints: [\"http://127.0.0.1:9\"], prefix: /locks}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The reset's process pauses long enough (a GC pause, a slow lock
	// service) for the newer holder's write to end and its marker to go.
	idle := func() {
		for {
			resp, err := cli.Get(ctx, "/fg/m/"+res+"\x00", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	idle()
	src := &racingSource{race: func() { admit(60); idle() }}
	s := &Server{}
	s.tokenSources.all = cfg.Gateway.Routes
	s.tokenSources.byID = map[string]*openSource{cfg.Gateway.Routes[0].TokenSource.Identity(): {kind: "etcd", src: src}}

	_, err = s.etcdReset(st)(ctx, res, 7, "op")
	if ref, ok := fencegate.Refusal(err); !ok || ref.Code != fencegate.CodeTokenOutOfRange {
		t.Errorf("reset to 7 after its holder released the lock: %v; want %s", err, fencegate.CodeTokenOutOfRange)
	}
	resp, err := cli.Get(ctx, "/fg/f/"+res)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the fence record: %v %v", resp, err)
	}
	var rec struct {
		Highest int64 `json:"h"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.Highest != 60 {
		t.Fatalf("the fence record in etcd after the reset: %s (%v); want highest 60 kept", resp.Kvs[0].Value, err)
	}
}
