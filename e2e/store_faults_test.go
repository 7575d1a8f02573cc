package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// storeFaultsYAML is a gateway on the embedded store at dir/fencegate.db.
func storeFaultsYAML(upstream, dir string) string {
	return ordersGateway(upstream, "10s") + `store:
  embedded: {path: ` + filepath.Join(dir, "fencegate.db") + `}
admin: {listen: $ADMIN}
`
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "fencegate.db.wal.*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(segs)
	return segs
}

// A byte flipped in an acknowledged advance-log record, after a kill -9:
// the gateway refuses to start and names the segment and the way out,
// instead of reading the damage as the end of the log and forwarding an
// older token. After `fence salvage-log` it serves again with every
// readable advance, and the older token is still refused: the upstream
// never sees it.
func TestDamagedAdvanceLogRefusesStart(t *testing.T) {
	rec, upstream := newUpstream(t)
	dir := t.TempDir()
	p := startFencegate(t, storeFaultsYAML(upstream, dir))
	gw := p.URL("gateway")
	for _, r := range []string{"a", "b", "c"} {
		for tok := 1; tok <= 5; tok++ {
			if code, body := write(t, "PUT", gw+"/orders/"+r, strconv.Itoa(tok), r+strconv.Itoa(tok)); code != 200 {
				t.Fatalf("write %s token %d: %d %s", r, tok, code, body)
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // the idle mark
	p.Kill9()
	segs := segmentFiles(t, dir)
	if len(segs) == 0 {
		t.Fatal("no advance-log segment left by the killed gateway")
	}
	last := segs[len(segs)-1]
	data, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	data[32+8+20] ^= 0x01 // a byte of the first record after the 32-byte header
	if err := os.WriteFile(last, data, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.bin, "serve", "-c", p.CfgPath).CombinedOutput()
	if err == nil {
		t.Fatal("the gateway started on a damaged advance log")
	}
	for _, want := range []string{"advance log damaged", last, "salvage-log", "docs/recovery.md"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("start refusal does not name %q:\n%s", want, out)
		}
	}

	out, err = exec.CommandContext(ctx, p.bin, "fence", "salvage-log", "-c", p.CfgPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "damaged:") {
		t.Fatalf("fence salvage-log: %v\n%s", err, out)
	}
	p.Restart()
	for _, r := range []string{"a", "b", "c"} {
		code, body := write(t, "PUT", p.URL("gateway")+"/orders/"+r, "4", "zombie")
		wantCode(t, "token 4 after salvage", code, body, 409, "stale_fencing_token")
	}
	for _, r := range []string{"a", "b", "c"} {
		if got := applied(rec, "/orders/"+r); strings.Contains(got, "zombie") {
			t.Fatalf("upstream applied an older token on /orders/%s: %s", r, got)
		}
	}
}

// A full disk while the advance log creates a segment: new tokens are
// refused (503, fail closed), /readyz fails and the metric and log say
// why; once space is freed /readyz heals by itself and new tokens are
// accepted, without a restart. The upstream never sees the refused write.
func TestFullDiskHealsWithoutRestart(t *testing.T) {
	rec, upstream := newUpstream(t)
	dir := testenv.SmallFS(t, "40m")
	p := startFencegate(t, storeFaultsYAML(upstream, dir))
	if code, body := write(t, "PUT", p.URL("gateway")+"/orders/x", "1", "one"); code != 200 {
		t.Fatalf("first write: %d %s", code, body)
	}
	p.Stop() // a clean stop checkpoints and removes the log
	p.Restart()
	// Leave less than a segment (8 MiB) free.
	filler := filepath.Join(dir, "filler")
	fillDisk(t, filler, 2<<20)

	code, body := write(t, "PUT", p.URL("gateway")+"/orders/x", "2", "two")
	wantCode(t, "advance on a full disk", code, body, 503, "fence_unavailable")
	if code := getStatus(t, p.URL("admin")+"/readyz"); code != 503 {
		t.Fatalf("/readyz on a full disk: %d; want 503", code)
	}
	waitLog(t, p, "advance log cannot append")
	if m := metricsText(t, p.URL("admin")); !strings.Contains(m, "fencegate_store_log_state 1") {
		t.Fatalf("metrics lack fencegate_store_log_state 1:\n%s", grepMetric(m, "fencegate_store_log"))
	}
	// A repeated token needs no advance: it still passes.
	if code, body := write(t, "PUT", p.URL("gateway")+"/orders/x", "1", "one again"); code != 200 {
		t.Fatalf("repeated token on a full disk: %d %s", code, body)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return getStatus(t, p.URL("admin")+"/readyz") == 200 })
	if code, body := write(t, "PUT", p.URL("gateway")+"/orders/x", "3", "three"); code != 200 {
		t.Fatalf("advance after space was freed: %d %s", code, body)
	}
	if m := metricsText(t, p.URL("admin")); !strings.Contains(m, "fencegate_store_log_state 0") {
		t.Fatalf("metrics lack fencegate_store_log_state 0 after healing:\n%s", grepMetric(m, "fencegate_store_log"))
	}
	code, body = write(t, "PUT", p.URL("gateway")+"/orders/x", "2", "two late")
	wantCode(t, "token 2 after 3", code, body, 409, "stale_fencing_token")
	if got := applied(rec, "/orders/x"); strings.Contains(got, "two") {
		t.Fatalf("upstream applied a refused write: %s", got)
	}
}

// fillDisk writes filler until the filesystem has about free bytes left.
func fillDisk(t *testing.T, path string, free int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
			t.Fatal(err)
		}
		if int64(st.Bavail)*int64(st.Bsize) <= free {
			return
		}
		if _, err := f.Write(buf); err != nil {
			return // full
		}
	}
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func metricsText(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepMetric(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
