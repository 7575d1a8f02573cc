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

// NginxServer is nginx with its WebDAV modules (ngx_http_dav_module and
// dav_ext) serving a writable directory. Unlike Apache, its DAV module
// checks that a COPY or MOVE's Destination names the host of the request's
// Host header ("different host" otherwise, 400), so a gateway in front of
// it must pass the client's Host on (upstream.preserve_host).
type NginxServer struct {
	URL  string // http://127.0.0.1:PORT
	Root string // the served directory
}

const nginxDAVExt = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so"

// Nginx starts nginx on a random loopback port with a generated
// configuration, as the www-data user when the tests run as root, stopped
// at the end of t.
func Nginx(t testing.TB) *NginxServer {
	t.Helper()
	bin := "/usr/sbin/nginx"
	if _, err := os.Stat(bin); err != nil {
		missing(t, "nginx", "run scripts/deps.sh (apt-get install nginx)")
	}
	if _, err := os.Stat(nginxDAVExt); err != nil {
		missing(t, "nginx's dav_ext module", "run scripts/deps.sh (apt-get install libnginx-mod-http-dav-ext)")
	}
	dir, err := os.MkdirTemp("/tmp", "fencegate-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	www := filepath.Join(dir, "www")
	tmp := filepath.Join(dir, "tmp")
	for _, p := range []string{www, tmp} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("www-data")
		if err != nil {
			missing(t, "the www-data user", "run scripts/deps.sh (apt-get install nginx creates it)")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		for _, p := range []string{dir, www, tmp} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	log := logPath(t, "nginx")
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := FreePort(t)
		conf := filepath.Join(dir, "nginx.conf")
		err := os.WriteFile(conf, []byte(fmt.Sprintf(`load_module %[4]s;
daemon off;
master_process off;
pid %[2]s/nginx.pid;
error_log stderr warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[2]s/tmp;
  proxy_temp_path %[2]s/tmp;
  fastcgi_temp_path %[2]s/tmp;
  uwsgi_temp_path %[2]s/tmp;
  scgi_temp_path %[2]s/tmp;
  server {
    listen 127.0.0.1:%[1]d;
    root %[3]s;
    location / {
      dav_methods PUT DELETE MKCOL COPY MOVE;
      dav_ext_methods PROPFIND OPTIONS;
      create_full_put_path on;
      dav_access user:rw group:rw all:r;
      autoindex on;
    }
  }
}
`, port, dir, www, nginxDAVExt)), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		p, err := startProcess("nginx", log, nil, cred, bin, "-c", conf, "-p", dir, "-e", "stderr")
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		lastErr = waitTCP(context.Background(), fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second, p.done)
		if lastErr == nil {
			p.cleanup(t, syscall.SIGTERM)
			return &NginxServer{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Root: www}
		}
		if !p.exited() {
			p.stop(syscall.SIGKILL, 5*time.Second)
			break
		}
	}
	t.Fatalf("testenv: nginx did not start: %v\n%s", lastErr, tail(log, 20))
	return nil
}
