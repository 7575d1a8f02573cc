package testenv

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// DAVServer is a WebDAV server (Apache mod_dav or nginx's DAV modules)
// serving a writable directory on a loopback port.
type DAVServer struct {
	URL  string // http://127.0.0.1:PORT
	Root string // the served directory
}

// davSpec is what one WebDAV server needs from the common launcher.
type davSpec struct {
	bin      string
	name     string      // also the Debian package that installs bin
	requires [][3]string // path, what it is, how to install it
	dirs     []string    // made below the server's directory, beside www, owned by its user
	// config returns the configuration file's text for a port; dir is the
	// server's directory, www the served one.
	config func(port int, dir, www string) string
	// args returns the command line's arguments for the configuration file.
	args func(conf, dir string) []string
	// errorLog is a file below dir the server writes its errors to, shown
	// when it does not start ("" when they go to its output).
	errorLog string
}

// startDAV starts spec's server with a generated configuration, as the
// www-data user when the tests run as root (never as root itself), stopped
// (SIGTERM) at the end of t. A port taken between choosing it and binding
// it is retried with another.
func startDAV(t testing.TB, spec davSpec) *DAVServer {
	t.Helper()
	install := "run scripts/deps.sh (apt-get install " + spec.name + ")"
	for _, r := range append([][3]string{{spec.bin, spec.name, install}}, spec.requires...) {
		if _, err := os.Stat(r[0]); err != nil {
			missing(t, r[1], r[2])
		}
	}
	dir, err := os.MkdirTemp("/tmp", "fencegate-"+spec.name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	owned := []string{dir}
	for _, d := range append([]string{"www"}, spec.dirs...) {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		owned = append(owned, p)
	}
	www := filepath.Join(dir, "www")
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("www-data")
		if err != nil {
			missing(t, "the www-data user", "run scripts/deps.sh (apt-get install "+spec.name+" creates it)")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		for _, p := range owned {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	log := logPath(t, spec.name)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := FreePort(t)
		conf := filepath.Join(dir, spec.name+".conf")
		if err := os.WriteFile(conf, []byte(spec.config(port, dir, www)), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := startProcess(spec.name, log, nil, cred, spec.bin, spec.args(conf, dir)...)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		lastErr = waitTCP(context.Background(), fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second, p.done)
		if lastErr == nil {
			p.cleanup(t, syscall.SIGTERM)
			return &DAVServer{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Root: www}
		}
		if !p.exited() {
			p.stop(syscall.SIGKILL, 5*time.Second)
			break
		}
	}
	errs := ""
	if spec.errorLog != "" {
		errs = "\n" + tail(filepath.Join(dir, spec.errorLog), 20)
	}
	t.Fatalf("testenv: %s did not start: %v\n%s%s", spec.name, lastErr, tail(log, 20), errs)
	return nil
}
