package telemetry

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/gateway"
)

// Refusal is one refused request, as the operator console shows it.
type Refusal struct {
	Time     time.Time `json:"time"`
	Route    string    `json:"route,omitempty"`
	Method   string    `json:"method"`
	Resource string    `json:"resource,omitempty"`
	Token    int64     `json:"token,omitempty"`
	Highest  int64     `json:"highest,omitempty"`
	Code     string    `json:"code"`
	Status   int       `json:"status,omitempty"`
	Owner    string    `json:"owner,omitempty"`
	TraceID  string    `json:"trace_id,omitempty"`
}

// DefaultRecentRefusals is the size of the recent-refusals buffer when the
// configuration does not say (admin.recent_refusals).
const DefaultRecentRefusals = 200

// Refusals keeps the last N refusals in a fixed ring: memory is N pointers
// and N records whatever the refusal rate. Add is lock-free (one atomic
// increment to claim a slot, one atomic pointer store), so concurrent
// refusals never wait for each other or for a reader; Recent copies the
// ring without stopping writers. A reader racing a burst of more than N
// refusals may see a mix of the newest ones, which is what "recent" means.
type Refusals struct {
	slots []atomic.Pointer[refusalSlot]
	next  atomic.Uint64
}

type refusalSlot struct {
	seq uint64
	r   Refusal
}

// NewRefusals returns a ring of n refusals (n <= 0: DefaultRecentRefusals).
func NewRefusals(n int) *Refusals {
	if n <= 0 {
		n = DefaultRecentRefusals
	}
	return &Refusals{slots: make([]atomic.Pointer[refusalSlot], n)}
}

// Cap is the number of refusals kept.
func (b *Refusals) Cap() int { return len(b.slots) }

// Add records r.
func (b *Refusals) Add(r Refusal) {
	seq := b.next.Add(1)
	b.slots[(seq-1)%uint64(len(b.slots))].Store(&refusalSlot{seq: seq, r: r})
}

// Recent returns the kept refusals, newest first.
func (b *Refusals) Recent() []Refusal {
	got := make([]*refusalSlot, 0, len(b.slots))
	for i := range b.slots {
		if s := b.slots[i].Load(); s != nil {
			got = append(got, s)
		}
	}
	slices.SortFunc(got, func(a, b *refusalSlot) int {
		switch {
		case a.seq > b.seq:
			return -1
		case a.seq < b.seq:
			return 1
		}
		return 0
	})
	out := make([]Refusal, len(got))
	for i, s := range got {
		out[i] = s.r
	}
	return out
}

// Total is the number of refusals added since start.
func (b *Refusals) Total() uint64 { return b.next.Load() }

// Observe implements gateway.Observer: refusals are recorded, every other
// outcome (forwarded, passthrough, a client that went away) is not.
func (b *Refusals) Observe(ctx context.Context, o *gateway.Outcome) {
	if !Refused(o.Decision) {
		return
	}
	r := Refusal{
		Time: time.Now(), Route: o.Route, Method: o.Method, Resource: o.Resource,
		Token: o.Token, Highest: o.Highest, Code: o.Decision, Status: o.Status, Owner: o.Owner,
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.TraceID = sc.TraceID().String()
	}
	b.Add(r)
}

// Refused reports whether a gateway.Outcome decision is a refusal (an
// error code) rather than forwarded, passthrough or client_closed.
func Refused(decision string) bool {
	switch decision {
	case DecisionForwarded, DecisionPassthrough, DecisionClientClosed, "":
		return false
	}
	return true
}

// DecisionClientClosed is the outcome of a request whose client went away
// before it was answered; nobody was refused.
const DecisionClientClosed = "client_closed"
