package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
)

// BenchmarkSharedHierarchical: a repeated token's admission on one replica,
// 16 writers over 100 keys /h/d/N, on the key alone (a route that is not
// hierarchical) and as a hierarchical route admits it (ScopeTree on the
// key, ScopeMember on /, /h and /h/d); and, "new", each write a new key
// with a token above every earlier one (an advance; hierarchical: also a
// raise of the three collections' below levels).
func BenchmarkSharedHierarchical(b *testing.B) {
	fs, _ := replicas(b, 1, SharedFenceOptions{ForwardTimeout: 30 * time.Second})
	f := fs[0]
	ctx := context.Background()
	var tok atomic.Int64 // the new tokens, rising across every round
	tok.Store(1000)
	for _, tc := range []struct {
		name  string
		admit func(key string, tok int64) (gateway.Permit, error)
	}{
		{"key", func(key string, tok int64) (gateway.Permit, error) {
			return f.Admit(ctx, gateway.Write{Resource: key, Token: tok})
		}},
		{"tree", func(key string, tok int64) (gateway.Permit, error) {
			return f.AdmitTree(ctx, gateway.Write{Resource: key, Token: tok, Scope: gateway.ScopeTree}, resource.Parents(key))
		}},
	} {
		b.Run(tc.name+"/new", func(b *testing.B) {
			benchNew(b, f, tc.admit, "/"+tc.name+"new/d/", &tok)
		})
		if tc.name == "tree" {
			// The collections written themselves (a WebDAV MKCOL): every
			// new token raises their below levels.
			b.Run("tree/new-written", func(b *testing.B) {
				for _, c := range []string{"/w", "/w/d"} {
					p, err := tc.admit(c, tok.Add(1))
					if err != nil {
						b.Fatal(err)
					}
					p.Release()
				}
				benchNew(b, f, tc.admit, "/w/d/", &tok)
			})
		}
		b.Run(tc.name, func(b *testing.B) {
			prefix := "/" + tc.name + "/d/"
			for i := range 100 { // every key exists at token 1
				p, err := tc.admit(fmt.Sprint(prefix, i), 1)
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
			}
			rt := f.WaitedRoundTrips()
			b.SetParallelism(8) // 16 writers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					p, err := tc.admit(fmt.Sprint(prefix, i%100), 1)
					if err != nil {
						b.Error(err)
						return
					}
					p.Release()
				}
			})
			b.ReportMetric(float64(f.WaitedRoundTrips()-rt)/float64(b.N), "waited_roundtrips/op")
		})
	}
}

// benchNew admits, with 16 writers, each write on a new key below prefix
// with a token above every earlier one.
func benchNew(b *testing.B, f *SharedFence, admit func(key string, tok int64) (gateway.Permit, error), prefix string, n *atomic.Int64) {
	b.SetParallelism(8)
	rt := f.WaitedRoundTrips()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			p, err := admit(fmt.Sprint(prefix, i), i)
			if err != nil {
				b.Error(err)
				return
			}
			p.Release()
		}
	})
	b.ReportMetric(float64(f.WaitedRoundTrips()-rt)/float64(b.N), "waited_roundtrips/op")
}
