package e2e

// Helpers of the token_source tests (etcd_test.go, zookeeper_test.go).

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/internal/recorder"
)

// cutProxy is a TCP proxy a worker reaches its lock service through, so a
// test can cut that worker off (test 8) while its connection to the
// gateway stays up.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(p.Cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			p.mu.Lock()
			if err != nil || p.cut {
				p.mu.Unlock()
				c.Close()
				if u != nil {
					u.Close()
				}
				continue
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection and refuses new ones.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// tokenOrder checks the upstream's history of key: every write applied
// carries a token no older than every write applied before it (I1), and
// returns the tokens.
func tokenOrder(t *testing.T, rec *recorder.Recorder, key string) []int64 {
	t.Helper()
	var toks []int64
	for i, a := range rec.HistoryOf(key) {
		tok, err := strconv.ParseInt(a.Token, 10, 64)
		if err != nil {
			t.Fatalf("history of %s: write %d has token %q", key, i, a.Token)
		}
		if len(toks) > 0 && tok < toks[len(toks)-1] {
			t.Fatalf("history of %s: token %d applied after %d (I1 broken): %s", key, tok, toks[len(toks)-1], applied(rec, key))
		}
		toks = append(toks, tok)
	}
	return toks
}
