package console

import (
	"cmp"
	"crypto/sha256"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Failed console logins are limited per client and per key typed, each a
// token bucket: LoginBurst failures at once, then one more every
// LoginRefill. A limited login is answered 429 before its key is checked,
// so the answer tells nothing about the key (a right key waits too); a
// successful login costs nothing.
const (
	LoginBurst  = 10
	LoginRefill = 6 * time.Second
	// maxLimited bounds the clients and keys remembered. A full table
	// forgets the buckets that have refilled, then those with the most
	// failures left: the least limited, so the clients that used theirs
	// up stay limited. Limiting every login not in a full table instead
	// would let anyone with enough addresses (an IPv6 /48 has 65,536 /64s)
	// lock every operator out of the console.
	maxLimited = 10000
)

type bucket struct {
	tokens float64
	at     time.Time
}

// loginLimiter holds the failed-login buckets of clients and keys.
type loginLimiter struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[string]bucket // "c" + client or "k" + SHA-256 of the key
}

// level returns the bucket of id refilled to now (a new one is full).
func (l *loginLimiter) level(id string, now time.Time) (bucket, bool) {
	b, ok := l.buckets[id]
	if !ok {
		return bucket{tokens: LoginBurst, at: now}, false
	}
	b.tokens = math.Min(LoginBurst, b.tokens+float64(now.Sub(b.at))/float64(LoginRefill))
	b.at = now
	return b, true
}

// wait returns how long the login of ids must wait: zero if each has a
// failure left.
func (l *loginLimiter) wait(ids ...string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var d time.Duration
	for _, id := range ids {
		b, _ := l.level(id, now)
		if b.tokens < 1 {
			d = max(d, time.Duration((1-b.tokens)*float64(LoginRefill)))
		}
	}
	return d
}

// fail takes one failure from each of ids' buckets.
func (l *loginLimiter) fail(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = make(map[string]bucket)
	}
	now := l.now()
	for _, id := range ids {
		b, known := l.level(id, now)
		if !known && len(l.buckets) >= maxLimited {
			l.makeRoom(now)
		}
		b.tokens = math.Max(0, b.tokens-1)
		l.buckets[id] = b
	}
}

// makeRoom forgets the buckets that have refilled (they are new ones) and,
// if that leaves the table over nine tenths full, the tenth with the most
// failures left: a scan per tenth of the table, not per failed login.
func (l *loginLimiter) makeRoom(now time.Time) {
	type entry struct {
		id     string
		tokens float64
	}
	left := make([]entry, 0, len(l.buckets))
	for id := range l.buckets {
		b, _ := l.level(id, now)
		if b.tokens >= LoginBurst {
			delete(l.buckets, id)
			continue
		}
		left = append(left, entry{id, b.tokens})
	}
	if over := len(left) - maxLimited*9/10; over > 0 {
		slices.SortFunc(left, func(a, b entry) int { return cmp.Compare(b.tokens, a.tokens) })
		for _, e := range left[:over] {
			delete(l.buckets, e.id)
		}
	}
}

// loginIDs are the buckets of a login: its client (the peer's address, an
// IPv6 client's /64; never a header the client writes) and the key typed
// (by its SHA-256: the key itself is not kept).
func loginIDs(r *http.Request, key string) []string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		host = ip.Mask(net.CIDRMask(64, 128)).String()
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(key)))
	return []string{"c" + host, "k" + string(sum[:])}
}
