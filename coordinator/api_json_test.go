package coordinator

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The hand-built answer is byte for byte what encoding/json writes.
func TestLeaseJSON(t *testing.T) {
	odd := time.FixedZone("odd", 5*3600+30*60+17) // an offset with seconds
	names := []string{"orders/1017", "/a/b", "", "a\"b", `back\slash`, "<script>&", "ünïcode", "tab\there", "\u2028", "x\xffy", strings.Repeat("k", 300)}
	times := []time.Time{
		{},
		time.Unix(1700000000, 123456789).UTC(),
		time.Unix(1700000000, 0).In(time.FixedZone("CEST", 2*3600)),
		time.Unix(1700000000, 500).In(odd),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	ttls := []Duration{0, Duration(30 * time.Second), Duration(1500 * time.Microsecond), Duration(-time.Second), Duration(time.Hour + 7)}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		r := LeaseResponse{
			Resource:  names[rnd.IntN(len(names))],
			Owner:     names[rnd.IntN(len(names))],
			Token:     rnd.Int64() - rnd.Int64(),
			ExpiresAt: times[rnd.IntN(len(times))],
			TTL:       ttls[rnd.IntN(len(ttls))],
			Held:      rnd.IntN(2) == 0,
		}
		want, err := json.Marshal(r)
		if err != nil {
			want = []byte("{}")
		}
		want = append(want, '\n')
		if got := appendLeaseJSON(nil, r); string(got) != string(want) {
			t.Fatalf("%+v:\n got %s\nwant %s", r, got, want)
		}
	}
}
