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

// ApacheServer is Apache httpd with mod_dav serving a writable directory:
// a real, widely used server that honours HTTP conditional writes (RFC 9110
// If-Match / If-None-Match on PUT and DELETE). Its quirks, kept as they
// are: a PUT's answer carries no ETag, and for about a second after a
// write HEAD serves a weak ETag (W/"..."), which If-Match never matches.
type ApacheServer struct {
	URL  string // http://127.0.0.1:PORT
	Root string // the served directory
}

const apacheModules = "/usr/lib/apache2/modules"

// Apache starts httpd on a random loopback port with a generated
// configuration, as the www-data user when the tests run as root (never as
// root itself), stopped at the end of t.
func Apache(t testing.TB) *ApacheServer {
	t.Helper()
	bin := "/usr/sbin/apache2"
	if _, err := os.Stat(bin); err != nil {
		missing(t, "Apache httpd (apache2)", "run scripts/deps.sh (apt-get install apache2)")
	}
	if _, err := os.Stat(filepath.Join(apacheModules, "mod_dav_fs.so")); err != nil {
		missing(t, "Apache mod_dav_fs", "run scripts/deps.sh (apt-get install apache2)")
	}
	dir, err := os.MkdirTemp("/tmp", "fencegate-httpd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("www-data")
		if err != nil {
			missing(t, "the www-data user", "run scripts/deps.sh (apt-get install apache2 creates it)")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		for _, p := range []string{dir, www} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	log := logPath(t, "apache")
	errorLog := filepath.Join(dir, "error.log") // written by the server's user
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := FreePort(t)
		conf := filepath.Join(dir, "httpd.conf")
		err := os.WriteFile(conf, []byte(fmt.Sprintf(`ServerName 127.0.0.1
Listen 127.0.0.1:%d
PidFile %[2]s/httpd.pid
ErrorLog %[3]s
LoadModule mpm_event_module %[4]s/mod_mpm_event.so
LoadModule authz_core_module %[4]s/mod_authz_core.so
LoadModule dav_module %[4]s/mod_dav.so
LoadModule dav_fs_module %[4]s/mod_dav_fs.so
DAVLockDB %[2]s/davlock
DocumentRoot %[5]s
<Directory %[5]s>
  Dav On
  Require all granted
</Directory>
`, port, dir, errorLog, apacheModules, www)), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		p, err := startProcess("apache", log, nil, cred, bin, "-f", conf, "-DFOREGROUND")
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		lastErr = waitTCP(context.Background(), fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second, p.done)
		if lastErr == nil {
			// httpd stops gracefully on SIGWINCH, at once on SIGTERM.
			p.cleanup(t, syscall.SIGTERM)
			return &ApacheServer{URL: url, Root: www}
		}
		if !p.exited() {
			p.stop(syscall.SIGKILL, 5*time.Second)
			break
		}
	}
	t.Fatalf("testenv: apache did not start: %v\n%s\n%s", lastErr, tail(log, 20), tail(errorLog, 20))
	return nil
}
