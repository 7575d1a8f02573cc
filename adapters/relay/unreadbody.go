package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// UnreadBodyFinding is what ProbeUnreadBody saw.
type UnreadBodyFinding int

const (
	// BodyRead: the upstream read the probe's body (or closed the
	// connection after its answer): a body never becomes a request.
	BodyRead UnreadBodyFinding = iota
	// BodyUnreadKeepAlive: on a keep-alive connection the upstream
	// answered the write without reading its body and then answered the
	// body as a request of its own. It honours Connection: close, which
	// the gateway sends with every request that has a body, so through the
	// gateway answers stay with their requests and no body is taken for a
	// request.
	BodyUnreadKeepAlive
	// BodyUnreadAlways: the same even with Connection: close. A worker's
	// body can carry requests the upstream acts on, unchecked by the
	// fence; the gateway cannot prevent it.
	BodyUnreadAlways
)

// unreadProbeWait is how long the probe waits for an answer to its hidden
// request after the first answer.
const unreadProbeWait = 2 * time.Second

// ProbeUnreadBody checks whether the upstream at rawURL answers a write
// without reading its body: it sends a PUT of a probe object under path
// whose body is itself a request (a GET of a second probe path), first on
// a keep-alive connection, then (if the body was answered as a request)
// with Connection: close. headers are set on both PUTs (the route's
// credential injection); tlsConfig is used for an https upstream (nil:
// system roots). A well-behaved upstream stores the probe object, whose
// content is the text of the hidden request.
func ProbeUnreadBody(ctx context.Context, rawURL, path string, headers map[string]string, tlsConfig *tls.Config) (UnreadBodyFinding, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return BodyRead, fmt.Errorf("upstream url: %w", err)
	}
	base := strings.TrimSuffix(u.Path, "/") + "/" + strings.Trim(path, "/")
	hidden := base + "/fencegate-doctor-hidden-request"
	body := "GET " + hidden + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	probe := func(closing bool) (bool, error) {
		conn, err := dialUpstream(ctx, u, tlsConfig)
		if err != nil {
			return false, err
		}
		defer conn.Close()
		if d, ok := ctx.Deadline(); ok {
			conn.SetDeadline(d)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.Scheme+"://"+u.Host+base+"/fencegate-doctor-unread-body", strings.NewReader(body))
		if err != nil {
			return false, err
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "text/plain")
		req.Close = closing
		if err := req.Write(conn); err != nil {
			return false, fmt.Errorf("send the probe: %w", err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return false, fmt.Errorf("read the answer to the probe: %w", err)
		}
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return false, nil // the answer ended with the connection
		}
		// Anything more on the connection is an answer to a request the
		// client never sent: the body, taken for one.
		conn.SetReadDeadline(time.Now().Add(unreadProbeWait))
		if _, err := http.ReadResponse(br, nil); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
				errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset") {
				return false, nil
			}
			return false, fmt.Errorf("after the answer to the probe: %w", err)
		}
		return true, nil
	}
	unread, err := probe(false)
	if err != nil || !unread {
		return BodyRead, err
	}
	unread, err = probe(true)
	switch {
	case err != nil:
		return BodyUnreadKeepAlive, err
	case unread:
		return BodyUnreadAlways, nil
	}
	return BodyUnreadKeepAlive, nil
}

// dialUpstream connects to u's host (TLS for https).
func dialUpstream(ctx context.Context, u *url.URL, tlsConfig *tls.Config) (net.Conn, error) {
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	if u.Scheme != "https" {
		return d.DialContext(ctx, "tcp", addr)
	}
	c := tlsConfig.Clone()
	if c == nil {
		c = &tls.Config{}
	}
	if c.ServerName == "" {
		c.ServerName = u.Hostname()
	}
	c.NextProtos = []string{"http/1.1"} // the probe is about HTTP/1.1 framing
	return (&tls.Dialer{NetDialer: d, Config: c}).DialContext(ctx, "tcp", addr)
}
