package e2e

// A history of what workers saw (acquisitions, writes and their answers,
// recoveries), checked with Porcupine against a model of a fenced register,
// one register per resource: a checker nobody here wrote decides whether
// some order of the operations, each taking effect within its call and
// return, explains every answer.

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

type fencedOpKind int

const (
	opIssue        fencedOpKind = iota // a lease issued token to owner (fence on issuance)
	opIssueUnknown                     // an acquisition whose outcome is unknown (it may have raised the fence)
	opWrite                            // a fenced write of token by owner
	opRecover                          // fence recover: every token up to token is refused
)

type fencedInput struct {
	kind  fencedOpKind
	key   string
	token int64
	owner string
}

// Outcomes of a write.
const (
	outOK      = "ok"      // 200: applied
	outStale   = "stale"   // 409 stale_fencing_token: not applied
	outRefused = "refused" // refused before the fence was touched (regressed, unknown token): not applied
	// outUnknown: a transport error, 502/503/504: may or may not have been
	// applied. fence_draining is one too: not applied, but the fence may
	// have been raised to its token first, which to the model is the same.
	outUnknown = "unknown"
)

// fencedState is one resource's fence as the model sees it: the highest
// token issued or applied and whose it is.
type fencedState struct {
	highest int64
	owner   string
}

// fencedRegister is the model. A write is applied only with a token above
// the highest, or equal to it by the same owner (a token belongs to one
// lease: the same token for two owners is a token issued twice). An issued
// token raises the highest, and must be new. A write refused as stale
// constrains nothing: it may have raised the fence to its own token first
// (its advance committed, then a newer token came while it waited for
// older writes to drain), which one atomic step cannot express; refusing
// is the safe decision in any case. What the model checks is that every
// write answered 200 was admitted at some instant within its call when no
// newer token had been issued or applied.
var fencedRegister = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(fencedInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{fencedState{}} },
	Step: func(state, input, output any) []any {
		st, in := state.(fencedState), input.(fencedInput)
		takes := in.token > st.highest || in.token == st.highest && in.owner == st.owner
		raised := fencedState{highest: in.token, owner: in.owner}
		switch in.kind {
		case opIssue:
			if in.token > st.highest {
				return []any{raised}
			}
			return nil // a token not above the fence was issued: issued twice, or reversed
		case opIssueUnknown:
			// It may have raised the fence to a token nobody saw: the
			// model cannot follow that raise, so it constrains nothing.
			return []any{st}
		case opRecover:
			if in.token > st.highest {
				return []any{fencedState{highest: in.token}}
			}
			return []any{st}
		}
		switch output.(string) {
		case outOK:
			if takes {
				return []any{raised}
			}
			return nil
		case outRefused:
			return []any{st}
		default:
			if takes {
				return []any{st, raised}
			}
			return []any{st}
		}
	},
	Equal: func(a, b any) bool { return a.(fencedState) == b.(fencedState) },
	DescribeOperation: func(input, output any) string {
		in := input.(fencedInput)
		switch in.kind {
		case opIssue:
			return fmt.Sprintf("issue %d to %s", in.token, in.owner)
		case opIssueUnknown:
			return "acquire (outcome unknown) by " + in.owner
		case opRecover:
			return fmt.Sprintf("recover: floor %d", in.token)
		}
		return fmt.Sprintf("write %d by %s: %v", in.token, in.owner, output)
	},
}

// history records operations from many goroutines.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// add records one operation that was called at call (h.now()) and returned now.
func (h *history) add(client int, call int64, in fencedInput, out string) {
	ret := h.now()
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// recoverAll records a recovery with floor for every key seen so far.
func (h *history) recoverAll(call int64, floor int64) {
	ret := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for _, op := range h.ops {
		seen[op.Input.(fencedInput).key] = true
	}
	for k := range seen {
		h.ops = append(h.ops, porcupine.Operation{ClientId: -1, Input: fencedInput{kind: opRecover, key: k, token: floor}, Call: call, Output: "", Return: ret})
	}
}

// writeOutcome classifies a write's answer for the model.
func writeOutcome(status int, body string, err error) string {
	switch {
	case err != nil:
		return outUnknown
	case status == 200:
		return outOK
	case status == 409 && strings.Contains(body, "stale_fencing_token"):
		return outStale
	case strings.Contains(body, "fence_store_regressed"), strings.Contains(body, "unknown_fencing_token"):
		// Refused before the fence was touched.
		return outRefused
	default:
		return outUnknown
	}
}

// checkLinearizable fails the test unless the history is linearizable
// against the fenced register; it names the resources whose history is not.
func (h *history) checkLinearizable(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	model := fencedRegister.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 60*time.Second)
	switch res {
	case porcupine.Ok:
		t.Logf("porcupine: linearizable over %d operations", len(ops))
		return
	case porcupine.Unknown:
		t.Fatalf("porcupine: no answer within the time limit over %d operations", len(ops))
	}
	var bad []string
	for _, part := range model.Partition(ops) {
		if !porcupine.CheckOperations(model, part) {
			bad = append(bad, part[0].Input.(fencedInput).key)
			if len(bad) == 1 {
				t.Logf("operations on %s (call..return ms: operation):\n%s", bad[0], describeOps(part))
			}
		}
	}
	msg := fmt.Sprintf("porcupine: %d operations are not linearizable against a fenced register; illegal on %v", len(ops), bad)
	if f, err := os.CreateTemp("", "fencegate-porcupine-*.html"); err == nil {
		if porcupine.Visualize(model, info, f) == nil {
			msg += " (visualization: " + f.Name() + ")"
		}
		f.Close()
	}
	t.Fatal(msg)
}

// describeOps lists operations in call order, one a line.
func describeOps(ops []porcupine.Operation) string {
	ops = append([]porcupine.Operation(nil), ops...)
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "  c%d %.6f..%.6f: %s\n", op.ClientId, float64(op.Call)/1e6, float64(op.Return)/1e6,
			fencedRegister.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}
