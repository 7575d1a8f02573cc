package e2e

// The workers in examples/ run against the real gateway and coordinator
// (and versitygw for boto3): each writes with its lease's token, and each
// stops with exit 3 on a stale refusal without the upstream changing.
// Python is Debian's /usr/bin/python3 with python3-requests and
// python3-boto3 (scripts/deps.sh): a pyenv python earlier in PATH has
// other site-packages.

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/internal/testenv"
)

const systemPython = "/usr/bin/python3"

// needPython fails (CI) or skips unless /usr/bin/python3 imports modules.
func needPython(t *testing.T, modules ...string) {
	t.Helper()
	for _, m := range modules {
		if err := exec.Command(systemPython, "-c", "import "+m).Run(); err != nil {
			msg := systemPython + " cannot import " + m + " (scripts/deps.sh installs python3-" + m + ")"
			if testenv.CI() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// runExample runs an example from examples/ and returns its exit status
// and output.
func runExample(t *testing.T, env []string, name string, args ...string) (int, string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "examples", name)
	var cmd *exec.Cmd
	if strings.HasSuffix(name, ".py") {
		cmd = exec.Command(systemPython, append([]string{path}, args...)...)
	} else {
		cmd = exec.Command("bash", append([]string{path}, args...)...)
	}
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// newerOwner takes and keeps the lease on res with a newer token and
// writes with it, so that an older token is stale.
func newerOwner(t *testing.T, p *Proc, res string) *client.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := coordinatorClient(p, "newer-owner").Acquire(ctx, res, client.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestExampleHTTPWorkers(t *testing.T) {
	for _, ex := range []string{"python/requests_worker.py", "curl-worker.sh"} {
		t.Run(ex, func(t *testing.T) {
			if strings.HasSuffix(ex, ".py") {
				needPython(t, "requests")
			} else if _, err := exec.LookPath("curl"); err != nil {
				if testenv.CI() {
					t.Fatal("curl is not installed (scripts/deps.sh installs it)")
				}
				t.Skip("curl is not installed")
			}
			rec, up := newUpstream(t)
			p := startFencegate(t, leaseRunYAML(up))
			env := []string{"FENCEGATE_COORDINATOR=" + p.URL("coordinator"), "FENCEGATE_URL=" + p.URL("gateway"), "FENCING_TOKEN="}

			// Takes its own lease, writes, releases.
			if code, out := runExample(t, env, ex, "/orders/9", "from-example"); code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if v, _ := rec.Get("/orders/9"); v != "from-example" {
				t.Fatalf("upstream holds %q", v)
			}
			first := rec.HistoryOf("/orders/9")[0].Token

			// The same token again after a newer owner: refused, stops with 3.
			newerOwner(t, p, "/orders/9")
			code, out := runExample(t, append(env, "FENCING_TOKEN="+first), ex, "/orders/9", "zombie")
			if code != 3 || !strings.Contains(out, "stale_fencing_token") {
				t.Fatalf("stale write: exit %d:\n%s\nwant 3 and stale_fencing_token", code, out)
			}
			if got := applied(rec, "/orders/9"); got != "PUT from-example@"+first {
				t.Fatalf("upstream applied %q", got)
			}
		})
	}
}

func TestExampleBoto3Worker(t *testing.T) {
	needPython(t, "boto3", "requests")
	e := startS3EnvCoordinator(t)
	env := []string{
		"FENCEGATE_COORDINATOR=" + e.Proc.URL("coordinator"), "FENCEGATE_URL=" + e.GW, "FENCING_TOKEN=",
		"AWS_ACCESS_KEY_ID=" + s3WorkerKey, "AWS_SECRET_ACCESS_KEY=" + s3WorkerSecret,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}
	if code, out := runExample(t, env, "python/boto3_worker.py", s3Bucket, "py/obj", "from-boto3"); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if got := e.objectBody(t, "py/obj"); got != "from-boto3" {
		t.Fatalf("S3 holds %q", got)
	}
	l := newerOwner(t, e.Proc, s3Bucket+"/py/obj")
	code, out := runExample(t, append(env, "FENCING_TOKEN=1"), "python/boto3_worker.py", s3Bucket, "py/obj", "zombie")
	if code != 3 || !strings.Contains(out, "stale_fencing_token") {
		t.Fatalf("stale upload (newer token %d): exit %d:\n%s\nwant 3 and stale_fencing_token", l.Token, code, out)
	}
	if got := e.objectBody(t, "py/obj"); got != "from-boto3" {
		t.Fatalf("S3 holds %q after the stale upload", got)
	}
}

// startS3EnvCoordinator is startS3Env with the coordinator on the same
// store.
func startS3EnvCoordinator(t *testing.T) *s3Env {
	t.Helper()
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	store := s3BoltStore + "coordinator: {enabled: true, listen: $COORDINATOR}\n"
	p := startFencegate(t, s3GatewayYAMLStore(store, s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s")))
	return &s3Env{S3: srv, Proc: p, GW: p.URL("gateway")}
}
