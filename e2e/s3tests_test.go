package e2e

import (
	"bufio"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Ceph's s3-tests, the object subset vendored in e2e/s3tests (tests.txt
// names it), run against VersityGW twice: directly with the store's keys,
// and through the gateway on a `precondition: etag` route with a worker's
// key and a Fencing-Token on every request. Every test that passes
// directly must pass through the gateway, except those listed in
// e2e/s3tests/through-gateway-fails.txt, each with the reason the gateway
// refuses or changes it by design. A listed test that no longer fails
// through the gateway (or no longer passes directly) is an error too, so
// the list stays true.
func TestS3Conformance(t *testing.T) {
	needPython(t, "boto3", "pytest", "munch", "isodate", "dateutil", "pytz", "requests")
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "e2e", "s3tests")
	expected := readExpectedFails(t, filepath.Join(dir, "through-gateway-fails.txt"))

	srv := testenv.Versity(t)
	p := startFencegate(t, s3GatewayYAML(s3RouteYAML("objects", "", srv.Endpoint, srv, "etag", "30s")))

	// The two runs go side by side (their buckets have different
	// prefixes): the wall time is the slower run's.
	start := time.Now()
	var direct, through map[string]s3TestResult
	var directErr, throughErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		direct, directErr = runS3Tests(dir, t.TempDir(), "direct", srv.Endpoint, srv.AccessKey, srv.SecretKey, "")
	}()
	go func() {
		defer wg.Done()
		through, throughErr = runS3Tests(dir, t.TempDir(), "gateway", p.URL("gateway"), s3WorkerKey, s3WorkerSecret, "1")
	}()
	wg.Wait()
	if directErr != nil || throughErr != nil {
		t.Fatalf("s3-tests did not run: %v; %v", directErr, throughErr)
	}
	t.Logf("s3-tests: %d run, %d pass directly, %d through the gateway, %d listed as failing through it by design (%s)",
		len(direct), count(direct, "passed"), count(through, "passed"), len(expected), time.Since(start).Round(time.Second))

	// A harness that runs nothing, or a store that fails everything,
	// proves nothing: most of the subset passes on VersityGW.
	if n := count(direct, "passed"); n < len(direct)/2 {
		t.Fatalf("only %d of %d tests pass directly against VersityGW", n, len(direct))
	}
	var names []string
	for name := range direct {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d, g := direct[name], through[name]
		reason, listed := expected[name]
		switch {
		case d.outcome == "passed" && g.outcome != "passed" && !listed:
			t.Errorf("%s passes directly but through the gateway: %s\n%s", name, g.outcome, g.message)
		case listed && d.outcome != "passed":
			t.Errorf("%s is listed as failing through the gateway (%s) but does not pass directly: %s\n%s", name, reason, d.outcome, d.message)
		case listed && g.outcome == "passed":
			t.Errorf("%s is listed as failing through the gateway (%s) but passes: remove it from through-gateway-fails.txt", name, reason)
		}
	}
	for name := range expected {
		if _, ok := direct[name]; !ok && os.Getenv("S3TESTS_K") == "" {
			t.Errorf("%s is listed in through-gateway-fails.txt but is not in the subset", name)
		}
	}
}

// s3TestResult is one test's outcome (passed, failed, error, skipped).
type s3TestResult struct {
	outcome string
	message string
}

func count(rs map[string]s3TestResult, outcome string) int {
	n := 0
	for _, r := range rs {
		if r.outcome == outcome {
			n++
		}
	}
	return n
}

// readExpectedFails reads "name: reason" lines ('#' comments).
func readExpectedFails(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(reason) == "" {
			t.Fatalf("%s: %q has no reason", path, line)
		}
		out[strings.TrimSpace(name)] = strings.TrimSpace(reason)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// runS3Tests runs the vendored subset against endpoint with one key for
// every user the tests know (main, alt, tenant: VersityGW's root, or the
// gateway's worker) and returns each test's outcome from pytest's JUnit
// report. token, if set, goes on every botocore request (fencegate_token.py).
func runS3Tests(dir, tmp, name, endpoint, access, secret, token string) (map[string]s3TestResult, error) {
	hostPort := strings.TrimPrefix(endpoint, "http://")
	host, port, _ := strings.Cut(hostPort, ":")
	user := func(section string) string {
		return fmt.Sprintf("[%s]\ndisplay_name = %s\nuser_id = %s\nemail = %s@example.com\naccess_key = %s\nsecret_key = %s\n",
			section, access, access, access, access, secret)
	}
	conf := fmt.Sprintf("[DEFAULT]\nhost = %s\nport = %s\nis_secure = False\nssl_verify = False\n\n[fixtures]\nbucket prefix = fg%s-{random}-\n\n",
		host, port, name[:1]) +
		user("s3 main") + "\n" + user("s3 alt") + "\n" + user("s3 tenant") + "tenant = fencegate\n\n" +
		user("iam") + "\n" + user("iam root") + "\n" + user("iam alt root")
	cfg := filepath.Join(tmp, "s3tests.conf")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	report := filepath.Join(tmp, "report.xml")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, systemPython, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fencegate_token", "-p", "botocore_compat",
		"--junitxml", report, "-o", "junit_family=xunit1", "s3tests/functional/test_s3.py")
	if k := os.Getenv("S3TESTS_K"); k != "" {
		// Debugging: a pytest -k expression selecting tests of the subset.
		cmd.Args = append(cmd.Args, "-k", k)
	}
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "S3TEST_CONF="+cfg, "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1",
		"FENCEGATE_TOKEN="+token, "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("s3-tests %s: timed out\n%s", name, tail(out, 4000))
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return nil, fmt.Errorf("s3-tests %s: %v", name, err)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return nil, fmt.Errorf("s3-tests %s wrote no report: %v\n%s", name, err, tail(out, 4000))
	}
	var doc struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testsuite>testcase"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("s3-tests %s: report: %v", name, err)
	}
	rs := map[string]s3TestResult{}
	for _, c := range doc.Cases {
		r := s3TestResult{outcome: "passed"}
		switch {
		case c.Failure != nil:
			r = s3TestResult{"failed", c.Failure.Message}
		case c.Error != nil:
			r = s3TestResult{"error", c.Error.Message}
		case c.Skipped != nil:
			r = s3TestResult{"skipped", c.Skipped.Message}
		}
		if old, dup := rs[c.Name]; dup && old.outcome != "passed" {
			// A teardown error is a second entry: keep the failure.
			continue
		}
		rs[c.Name] = r
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("s3-tests %s ran no test\n%s", name, tail(out, 4000))
	}
	return rs, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
