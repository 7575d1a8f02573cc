package testenv

import (
	"fmt"
	"testing"
)

// NginxServer is nginx with its WebDAV modules (ngx_http_dav_module and
// dav_ext) serving a writable directory. Unlike Apache, its DAV module
// checks that a COPY or MOVE's Destination names the host of the request's
// Host header ("different host" otherwise, 400), so a gateway in front of
// it must pass the client's Host on (upstream.preserve_host).
type NginxServer = DAVServer

const nginxDAVExt = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so"

// Nginx starts nginx on a random loopback port with a generated
// configuration, as the www-data user when the tests run as root, stopped
// at the end of t.
func Nginx(t testing.TB) *NginxServer {
	t.Helper()
	return startDAV(t, davSpec{
		name: "nginx",
		bin:  "/usr/sbin/nginx",
		requires: [][3]string{
			{nginxDAVExt, "nginx's dav_ext module", "run scripts/deps.sh (apt-get install libnginx-mod-http-dav-ext)"},
		},
		dirs: []string{"tmp"},
		config: func(port int, dir, www string) string {
			return fmt.Sprintf(`load_module %[4]s;
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
`, port, dir, www, nginxDAVExt)
		},
		args: func(conf, dir string) []string { return []string{"-c", conf, "-p", dir, "-e", "stderr"} },
	})
}
