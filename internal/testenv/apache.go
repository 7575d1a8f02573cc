package testenv

import (
	"fmt"
	"testing"
)

// ApacheServer is Apache httpd with mod_dav serving a writable directory:
// a real, widely used server that honours HTTP conditional writes (RFC 9110
// If-Match / If-None-Match on PUT and DELETE). Its quirks, kept as they
// are: a PUT's answer carries no ETag, and for about a second after a
// write HEAD serves a weak ETag (W/"..."), which If-Match never matches.
type ApacheServer = DAVServer

const apacheModules = "/usr/lib/apache2/modules"

// Apache starts httpd on a random loopback port with a generated
// configuration, as the www-data user when the tests run as root (never as
// root itself), stopped at the end of t. httpd stops at once on SIGTERM
// (gracefully on SIGWINCH).
func Apache(t testing.TB) *ApacheServer {
	t.Helper()
	return startDAV(t, davSpec{
		name: "apache2",
		bin:  "/usr/sbin/apache2",
		requires: [][3]string{
			{apacheModules + "/mod_dav_fs.so", "Apache mod_dav_fs", "run scripts/deps.sh (apt-get install apache2)"},
		},
		errorLog: "error.log", // written by the server's user
		config: func(port int, dir, www string) string {
			return fmt.Sprintf(`ServerName 127.0.0.1
Listen 127.0.0.1:%d
PidFile %[2]s/httpd.pid
ErrorLog %[2]s/error.log
LoadModule mpm_event_module %[3]s/mod_mpm_event.so
LoadModule authz_core_module %[3]s/mod_authz_core.so
LoadModule dav_module %[3]s/mod_dav.so
LoadModule dav_fs_module %[3]s/mod_dav_fs.so
DAVLockDB %[2]s/davlock
DocumentRoot %[4]s
<Directory %[4]s>
  Dav On
  Require all granted
</Directory>
`, port, dir, apacheModules, www)
		},
		args: func(conf, _ string) []string { return []string{"-f", conf, "-DFOREGROUND"} },
	})
}
