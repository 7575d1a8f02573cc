package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Request bodies against Azurite, through one gateway with
// max_body_bytes: Put Blob over the limit (declared, chunked, after
// Expect: 100-continue), a client gone mid-body once admitted (the
// upstream gets part of the body and a closed connection), and Blob
// Batch (a body of requests on other blobs) however it is spelled. The
// victim is fenced at 100; a fresh token (above) and a stale one (below)
// must change nothing in Azurite's whole state (azWorld.state), and a
// refusal before the fence leaves the victim's fence where it was. The
// controls at the end show the store runs these requests when they reach
// it: the batch, sent to Azurite itself, deletes the victim, and the
// streamed Put Blob sent whole through the gateway writes it.
func TestBodyAttackAzure(t *testing.T) {
	// The limit is above the bodies the gateway reads whole before the
	// fence (32 KiB): a body within it streams after the fence.
	const azLimit = 64 << 10
	w := &azWorld{}
	w.srv = testenv.Azurite(t)
	w.p = startFencegate(t, s3GatewayYAML(azRouteYAML("blobs", "", w.srv.Endpoint, "", "30s")+
		fmt.Sprintf("      max_body_bytes: %d\n", azLimit)))
	w.gw = w.p.URL("gateway")
	bb := [][2]string{{"X-Ms-Blob-Type", "BlockBlob"}}
	for _, s := range []azShape{
		{name: "container", method: "PUT", target: "/fenced?restype=container"},
		{name: "victim", method: "PUT", target: "/fenced/victim", hdr: bb, body: "victim body"},
		{name: "bystander", method: "PUT", target: "/fenced/bystander", hdr: bb, body: "bystander body"},
	} {
		if st, _, body := azSigned(t, w.gw, azWorkerAccount, azWorkerKey, s, azHigh); st != http.StatusCreated {
			t.Fatalf("seed %s: %d %s", s.name, st, body)
		}
	}
	fence := func() int64 { return fenceHighest(t, w.p.URL("admin"), "fenced/victim") }
	over := strings.Repeat("x", azLimit+1)
	// batch is a Blob Batch to target whose one request deletes the
	// victim, signed as the Blob Batch API asks (each request with
	// Shared Key) for base as account.
	batch := func(target, base, account, key string) azShape {
		sub, err := azSignedRequest(base, account, key, azShape{method: "DELETE", target: "/fenced/victim"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString("--batch_b\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: 0\r\n\r\n")
		fmt.Fprintf(&b, "DELETE %s HTTP/1.1\r\n", sub.URL.RequestURI())
		sub.Header.Write(&b)
		b.WriteString("Content-Length: 0\r\n\r\n\r\n--batch_b--\r\n")
		return azShape{method: "POST", target: target, hdr: [][2]string{{"Content-Type", "multipart/mixed; boundary=batch_b"}}, body: b.String()}
	}
	for _, tc := range []struct {
		name string
		s    azShape
		// raw: sent with this framing of the table instead of the client.
		raw string
		// afterFence: the body is streamed after the fence admitted the
		// fresh token, and cut there: the fence may move, the store not.
		afterFence bool
	}{
		{name: "Put Blob over the limit, with a length", s: azShape{method: "PUT", target: "/fenced/victim", hdr: bb, body: over}},
		{name: "Put Blob over the limit, chunked (no length: 411)", s: azShape{method: "PUT", target: "/fenced/victim", hdr: bb, body: over, chunked: true}},
		{name: "Put Blob over the limit, after Expect: 100-continue", s: azShape{method: "PUT", target: "/fenced/victim", hdr: bb, body: over},
			raw: "Expect: 100-continue, over the limit"},
		{name: "Put Blob streamed, the client gone mid-body", s: azShape{method: "PUT", target: "/fenced/victim", hdr: bb, body: strings.Repeat("y", 48<<10)},
			raw: "client vanishes mid-body, with a length", afterFence: true},
		{name: "Blob Batch on the account", s: batch("/?comp=batch", w.gw, azWorkerAccount, azWorkerKey)},
		{name: "Blob Batch on the container", s: batch("/fenced?restype=container&comp=batch", w.gw, azWorkerAccount, azWorkerKey)},
		{name: "Blob Batch, comp in another case", s: batch("/fenced?restype=container&comp=Batch", w.gw, azWorkerAccount, azWorkerKey)},
		{name: "Blob Batch, the parameter's name in another case", s: batch("/fenced?restype=container&Comp=batch", w.gw, azWorkerAccount, azWorkerKey)},
		{name: "Blob Batch, comp twice", s: batch("/fenced?restype=container&comp=metadata&comp=batch", w.gw, azWorkerAccount, azWorkerKey)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, high := w.state(t), fence()
			for _, token := range []int64{high + 1, azHigh - 1} {
				tc.s.name = tc.name
				var got []int
				if tc.raw == "" {
					st, _, _ := azSigned(t, w.gw, azWorkerAccount, azWorkerKey, tc.s, token)
					got = []int{st}
				} else {
					req, err := azSignedRequest(w.gw, azWorkerAccount, azWorkerKey, tc.s, token)
					if err != nil {
						t.Fatal(err)
					}
					got = exchange(t, w.gw, framingNamed(t, tc.raw), req, []byte(tc.s.body))
				}
				for _, st := range got {
					if st < 400 {
						t.Errorf("token %d: answers %v; want refusals", token, got)
					}
				}
				// A write admitted and cut may still be in flight: the
				// store must stay as it was all the while.
				for end := time.Now().Add(300 * time.Millisecond); ; time.Sleep(50 * time.Millisecond) {
					if d := azDiff(before, w.state(t)); len(d) > 0 {
						t.Fatalf("token %d: the store changed:\n  %s", token, strings.Join(d, "\n  "))
					}
					if time.Now().After(end) {
						break
					}
				}
			}
			if h := fence(); h != high && !tc.afterFence {
				t.Errorf("the victim's fence is %d; want %d (refused before the fence)", h, high)
			}
		})
	}
	// The controls: the store runs these requests when they reach it.
	// The batch, sent to Azurite itself, deletes the victim; the streamed
	// Put Blob, sent whole through the gateway, replaces it.
	s := batch("/?comp=batch", w.srv.Endpoint, testenv.AzuriteAccount, testenv.AzuriteKey)
	s.name = "batch to the store"
	if st, _, body := azSigned(t, w.srv.Endpoint, testenv.AzuriteAccount, testenv.AzuriteKey, s, 0); st != http.StatusAccepted ||
		!strings.Contains(body, "HTTP/1.1 202") {
		t.Fatalf("%s: %d %s", s.name, st, body)
	}
	if _, ok := w.state(t)["blob fenced/victim"]; ok {
		t.Fatalf("%s: the victim is still there", s.name)
	}
	put := azShape{name: "streamed Put Blob", method: "PUT", target: "/fenced/victim", hdr: bb, body: strings.Repeat("y", 48<<10)}
	req, err := azSignedRequest(w.gw, azWorkerAccount, azWorkerKey, put, fence()+1)
	if err != nil {
		t.Fatal(err)
	}
	if got := exchange(t, w.gw, framingNamed(t, "with a length"), req, []byte(put.body)); len(got) != 1 || got[0] != http.StatusCreated {
		t.Fatalf("%s: answers %v; want 201", put.name, got)
	}
	if _, ok := w.state(t)["blob fenced/victim"]; !ok {
		t.Fatalf("%s: answered 201 but the victim is not there", put.name)
	}
}
