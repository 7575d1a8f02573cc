package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestDoctorEtcdQuorum checks a real three-member cluster whole, with one
// member killed (quorum holds: a warning naming it) and with two killed
// (quorum lost: a failure).
func TestDoctorEtcdQuorum(t *testing.T) {
	cluster := testenv.Etcd(t, 3)
	o := etcd.ClientOptions{Endpoints: cluster.Endpoints}
	check := func(t *testing.T) (etcdReport, string, error) {
		t.Helper()
		var out bytes.Buffer
		rep, err := checkEtcd(context.Background(), &out, "store.etcd", o)
		t.Logf("doctor:\n%s", out.String())
		return rep, out.String(), err
	}

	t.Run("whole", func(t *testing.T) {
		rep, out, err := check(t)
		if err != nil || rep.Voters != 3 || rep.Healthy != 3 || rep.Leader == "" || rep.MinVersion == "" {
			t.Fatalf("report %+v, %v; want 3 of 3 answering, a leader and a version", rep, err)
		}
		for _, want := range []string{"store.etcd: ok: 3 voting member(s) (m0, m1, m2), all answer: quorum 2, 1 loss(es) tolerated",
			"store.etcd: ok: leader m", "store.etcd: warn: authentication off", "plain HTTP on loopback"} {
			if !strings.Contains(out, want) {
				t.Errorf("doctor's lines lack %q", want)
			}
		}
	})

	t.Run("one member killed", func(t *testing.T) {
		cluster.Kill(1)
		var rep etcdReport
		var out string
		var err error
		// The survivors elect a leader within a second or two if m1 led.
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
			if rep, out, err = check(t); err == nil && rep.Leader != "" {
				break
			}
		}
		if err != nil || rep.Healthy != 2 || !slices.Equal(rep.Down, []string{"m1"}) || rep.Leader == "" || rep.Leader == "m1" {
			t.Fatalf("report %+v, %v; want m1 down, quorum kept, a leader among m0 and m2", rep, err)
		}
		if !strings.Contains(out, "store.etcd: warn: 3 voting member(s) (m0, m1, m2), 2 answer (down: m1): quorum holds (2 needed), 1 more loss(es) stop every fenced write") {
			t.Errorf("doctor's lines do not warn of m1:\n%s", out)
		}
	})

	t.Run("two members killed", func(t *testing.T) {
		cluster.Kill(2)
		rep, out, err := check(t)
		if err == nil || rep.Healthy != 1 {
			t.Fatalf("report %+v, %v; want a failure with 1 member answering", rep, err)
		}
		if !strings.Contains(out, "store.etcd: FAIL: quorum lost: 1 of 3 voting member(s) (m0, m1, m2) answer, 2 needed (down: m1, m2)") {
			t.Errorf("doctor's lines do not say the quorum is lost:\n%s", out)
		}
	})
}

// TestDoctorEtcdTLSAuth: on a cluster with TLS client certificates and
// authentication, doctor (from a configuration file, as an operator runs
// it) reports both; with another CA it fails and says the certificate is
// the problem, without the password.
func TestDoctorEtcdTLSAuth(t *testing.T) {
	cluster := testenv.EtcdWith(t, 1, testenv.EtcdOptions{TLS: true, Auth: true})
	dir := t.TempDir()
	write := func(ca string) string {
		path := filepath.Join(dir, "fencegate.yaml")
		cfg := "store:\n  embedded: {path: " + filepath.Join(dir, "fencegate.db") + "}\n" +
			"gateway:\n  listen: 127.0.0.1:0\n  routes:\n    - name: orders\n      match: {path_prefix: /orders/}\n" +
			"      upstream: {url: \"http://127.0.0.1:9\"}\n      resource: \"{path}\"\n" +
			"      token_source:\n        etcd:\n          endpoints: [\"" + cluster.Endpoints[0] + "\"]\n          prefix: /fencegate/locks\n" +
			"          username: root\n          password: " + cluster.Password + "\n" +
			"          tls: {ca_file: " + ca + ", cert_file: " + cluster.CertFile + ", key_file: " + cluster.KeyFile + "}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	out, errOut, code := captureStdout(t, func() (string, int) {
		_, e, c := runCLI("doctor", "-c", write(cluster.CAFile))
		return e, c
	})
	if code != 0 {
		t.Fatalf("doctor exit %d: %s\n%s", code, errOut, out)
	}
	// The test CA's certificates expire within a day: within the margin.
	for _, want := range []string{"token_source etcd (route orders): ok: authentication on (user root)",
		"warn: " + strings.TrimPrefix(cluster.Endpoints[0], "https://") + ": TLS 1.3, server certificate valid until", "(0 days), client certificate sent",
		"warn: 1 voting member(s) (m0): a cluster of fewer than 3 members survives no member's loss"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor's lines lack %q:\n%s", want, out)
		}
	}
	out, errOut, code = captureStdout(t, func() (string, int) {
		_, e, c := runCLI("doctor", "-c", write(testenv.OtherCA(t)))
		return e, c
	})
	if code != 1 || !strings.Contains(out, "certificate signed by unknown authority") || strings.Contains(out+errOut, cluster.Password) {
		t.Fatalf("doctor with another CA: exit %d, %s\n%s; want exit 1 naming the certificate, no password", code, errOut, out)
	}
}

// captureStdout runs f with os.Stdout sent to a pipe (doctor prints its
// lines there) and returns what it printed and f's results.
func captureStdout(t *testing.T, f func() (string, int)) (string, string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r)
		done <- b.String()
	}()
	errOut, code := f()
	os.Stdout = old
	w.Close()
	return <-done, errOut, code
}
