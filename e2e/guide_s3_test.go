package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestGuideS3AsPasted runs configs/s3.yaml as its header tells a newcomer
// to: the serve line, the boto3 worker and doctor, read from the file's own
// comment. Only what cannot be pasted on a test machine is replaced: the
// S3 endpoint (a VersityGW started here), the listen ports (free ones, so
// the worker is told the gateway's and the coordinator's URLs) and the
// data directory. Checked on the object VersityGW holds, and a stale
// write afterwards leaves it alone.
func TestGuideS3AsPasted(t *testing.T) {
	needPython(t, "boto3", "requests")
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "configs", "s3.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)

	// The commands of the header comment, continuation lines joined.
	var cmds []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "#   ") && !strings.HasPrefix(line, "#     ") {
			continue
		}
		c := strings.TrimSpace(strings.TrimPrefix(line, "#"))
		if n := len(cmds); n > 0 && strings.HasSuffix(cmds[n-1], "\\") {
			cmds[n-1] = strings.TrimSuffix(cmds[n-1], "\\") + c
			continue
		}
		cmds = append(cmds, c)
	}
	find := func(word string) string {
		for _, c := range cmds {
			if strings.Contains(c, word) {
				return c
			}
		}
		t.Fatalf("configs/s3.yaml's header shows no %q command; commands: %q", word, cmds)
		return ""
	}
	serve, worker, doctor := find("fencegate serve"), find("boto3_worker.py"), find("fencegate doctor")

	srv := testenv.Versity(t)
	bucket := regexp.MustCompile(`boto3_worker\.py (\S+) (\S+) (\S+)`).FindStringSubmatch(worker)
	if bucket == nil {
		t.Fatalf("worker command %q: want BUCKET KEY VALUE", worker)
	}
	srv.CreateBucket(t, bucket[1])

	// The config as shipped, with the endpoint, ports and data directory
	// of this machine.
	cfg := strings.NewReplacer(
		"http://127.0.0.1:7070", srv.Endpoint,
		"127.0.0.1:8080", "$GATEWAY", "127.0.0.1:8081", "$COORDINATOR", "127.0.0.1:9090", "$ADMIN",
		"./data/fencegate.db", "$DIR/fencegate.db",
	).Replace(text)
	if cfg == text {
		t.Fatal("configs/s3.yaml no longer names the endpoint and ports this test replaces")
	}
	// The serve line's environment, with this VersityGW's keys and a
	// worker secret of the test's choosing.
	envOf := func(cmd string) map[string]string {
		m := map[string]string{}
		for _, f := range strings.Fields(cmd) {
			if k, v, ok := strings.Cut(f, "="); ok && regexp.MustCompile(`^[A-Z_]+$`).MatchString(k) {
				m[k] = v
			}
		}
		return m
	}
	secrets := map[string]string{"UPSTREAM_KEY": srv.AccessKey, "UPSTREAM_SECRET": srv.SecretKey, "WORKER_SECRET": "guide-worker-secret"}
	var env []string
	for k := range envOf(serve) {
		v, ok := secrets[k]
		if !ok {
			t.Fatalf("the serve line sets %s, which this test does not know how to fill", k)
		}
		env = append(env, k+"="+v)
	}
	p := startFencegate(t, cfg, env...)

	// The worker line, run by bash from the repository root as pasted, with
	// the URLs of the substituted ports.
	run := func(cmd string, extra ...string) (int, string) {
		c := exec.Command("bash", "-c", cmd)
		c.Dir = root
		c.Env = append(os.Environ(), "WORKER_SECRET=guide-worker-secret",
			"FENCEGATE_URL="+p.URL("gateway"), "FENCEGATE_COORDINATOR="+p.URL("coordinator"),
			"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "PYTHONDONTWRITEBYTECODE=1")
		c.Env = append(c.Env, extra...)
		out, err := c.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := run(worker); code != 0 {
		t.Fatalf("%s: exit %d\n%s", worker, code, out)
	}
	e := &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}
	if got := e.objectIn(t, bucket[1], bucket[2]); got != bucket[3] {
		t.Fatalf("VersityGW holds %q at %s/%s; want %q", got, bucket[1], bucket[2], bucket[3])
	}
	// A newer owner writes; the guide's worker with an older token is
	// refused and the object stays the newer owner's.
	l := newerOwner(t, p, bucket[1]+"/"+bucket[2])
	if code, out := run(strings.Replace(worker, bucket[3], "zombie", 1), "FENCING_TOKEN=1"); code != 3 || !strings.Contains(out, "stale_fencing_token") {
		t.Fatalf("stale write (newer token %d): exit %d\n%s\nwant 3 and stale_fencing_token", l.Token, code, out)
	}
	if got := e.objectIn(t, bucket[1], bucket[2]); got == "zombie" {
		t.Fatalf("VersityGW holds the stale write")
	}

	// doctor, as pasted, against the same configuration file.
	file := filepath.Join(t.TempDir(), "s3.yaml")
	y := strings.NewReplacer("$GATEWAY", "127.0.0.1:1", "$COORDINATOR", "127.0.0.1:2", "$ADMIN", "127.0.0.1:3", "$DIR", t.TempDir()).Replace(cfg)
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
	dc := strings.Replace(strings.Replace(doctor, "configs/s3.yaml", file, 1), "fencegate ", bin+" ", 1)
	if code, out := run(strings.Join(append(env, dc), " ")); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("%s: exit %d\n%s", doctor, code, out)
	}
}
