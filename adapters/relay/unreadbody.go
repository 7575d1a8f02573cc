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
	"slices"
	"strings"
	"sync"
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

// UnreadShape is one kind of write ProbeUnreadBodies sends: the shapes
// servers commonly answer from the head alone, before reading the body.
type UnreadShape struct {
	// Name says what the write was, for the doctor's lines.
	Name string
	// Shortcut: the write carries a precondition or an Expect, which the
	// gateway sends with Connection: close even on upstream.keep_alive_writes
	// routes (upstreamconn.Transport.CloseShortcuts).
	Shortcut bool

	path    string            // under the probe prefix, or "" for the probe object
	headers map[string]string // added to the route's
	noAuth  bool              // without the route's headers
	expect  bool              // Expect: 100-continue
}

// UnreadShapes are the shapes ProbeUnreadBodies sends, in order: the
// first writes the probe object the conditional ones then refer to.
var UnreadShapes = []UnreadShape{
	{Name: "a write"},
	{Name: "a write with If-None-Match: * on an existing object (a conditional 304 or 412)", Shortcut: true,
		headers: map[string]string{"If-None-Match": "*"}},
	{Name: "a write with an If-Match that does not match (a conditional 412)", Shortcut: true,
		headers: map[string]string{"If-Match": `"fencegate-doctor-no-such-etag"`}},
	{Name: "a write without the route's headers (a 401 or 403 where they carry the credentials)", noAuth: true},
	{Name: "a write under a parent that does not exist (a 404 or 409)", path: "fencegate-doctor-missing/fencegate-doctor-missing/fencegate-doctor-unread-body"},
	{Name: "a write to a path with // (a redirect where the upstream cleans paths)", path: "/fencegate-doctor-unread-body"},
	{Name: "a write with Expect: 100-continue", Shortcut: true, expect: true},
}

// UnreadProbe is what one shape of ProbeUnreadBodies found.
type UnreadProbe struct {
	Shape   UnreadShape
	Status  int // the upstream's answer to the write
	Finding UnreadBodyFinding
}

// ProbeUnreadBody checks whether the upstream at rawURL answers a write
// without reading its body, in any shape of ProbeUnreadBodies, and returns
// the worst finding. For routes that keep their connections across every
// write, conditional ones included (GCS, Azure).
func ProbeUnreadBody(ctx context.Context, rawURL, path string, headers map[string]string, tlsConfig *tls.Config) (UnreadBodyFinding, error) {
	probes, err := ProbeUnreadBodies(ctx, rawURL, path, headers, tlsConfig)
	worst := BodyRead
	for _, p := range probes {
		worst = max(worst, p.Finding)
	}
	return worst, err
}

// ProbeUnreadBodies checks whether the upstream at rawURL answers a write
// without reading its body: it sends a PUT of a probe object under path
// whose body is itself a request (a GET of a second probe path), first on
// a keep-alive connection, then (if the body was answered as a request)
// with Connection: close. headers are set on both PUTs (the route's
// credential injection); tlsConfig is used for an https upstream (nil:
// system roots). A well-behaved upstream stores the probe object, whose
// content is the text of the hidden request. It does so with every
// UnreadShape: an upstream that reads the body of a plain write may still
// answer a refusal (a precondition, missing credentials, an unknown path, a
// redirect, an Expect) from the head alone and take the body for its next
// request. The first shape runs first (it writes the probe object), the
// others together. A shape without the route's headers is skipped when
// the route has none.
func ProbeUnreadBodies(ctx context.Context, rawURL, path string, headers map[string]string, tlsConfig *tls.Config) ([]UnreadProbe, error) {
	first, err := probeUnreadShape(ctx, rawURL, path, headers, tlsConfig, UnreadShapes[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", UnreadShapes[0].Name, err)
	}
	out := []UnreadProbe{first}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for _, sh := range UnreadShapes[1:] {
		if sh.noAuth && len(headers) == 0 {
			continue
		}
		wg.Go(func() {
			p, err := probeUnreadShape(ctx, rawURL, path, headers, tlsConfig, sh)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, errNoAnswer):
				// The upstream closed the connection rather than answer
				// this shape (a filter refusing a // path): no body is
				// taken for a request on a connection that is gone.
				out = append(out, UnreadProbe{Shape: sh})
				return
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", sh.Name, err))
				return
			}
			out = append(out, p)
		})
	}
	wg.Wait()
	slices.SortStableFunc(out, func(a, b UnreadProbe) int {
		return slices.IndexFunc(UnreadShapes, func(s UnreadShape) bool { return s.Name == a.Shape.Name }) -
			slices.IndexFunc(UnreadShapes, func(s UnreadShape) bool { return s.Name == b.Shape.Name })
	})
	return out, errors.Join(errs...)
}

// probeUnreadShape sends one shape of the probe, on a kept connection and,
// if its body was answered as a request there, with Connection: close.
func probeUnreadShape(ctx context.Context, rawURL, path string, headers map[string]string, tlsConfig *tls.Config, sh UnreadShape) (UnreadProbe, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return UnreadProbe{Shape: sh}, fmt.Errorf("upstream url: %w", err)
	}
	base := strings.TrimSuffix(u.Path, "/") + "/" + strings.Trim(path, "/")
	hidden := base + "/fencegate-doctor-hidden-request"
	body := "GET " + hidden + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	target := base + "/fencegate-doctor-unread-body"
	if sh.path != "" {
		target = base + "/" + sh.path
	}
	res := UnreadProbe{Shape: sh}
	probe := func(closing bool) (bool, error) {
		conn, err := dialUpstream(ctx, u, tlsConfig)
		if err != nil {
			return false, err
		}
		defer conn.Close()
		if d, ok := ctx.Deadline(); ok {
			conn.SetDeadline(d)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.Scheme+"://"+u.Host+target, strings.NewReader(body))
		if err != nil {
			return false, err
		}
		if !sh.noAuth {
			for k, v := range headers {
				req.Header.Set(k, v)
			}
		}
		for k, v := range sh.headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "text/plain")
		req.Close = closing
		br := bufio.NewReader(conn)
		var resp *http.Response
		if sh.expect {
			resp, err = expectContinue(conn, br, req, body)
		} else {
			if err = req.Write(conn); err != nil {
				return false, fmt.Errorf("send the probe: %w", err)
			}
			resp, err = http.ReadResponse(br, req)
		}
		if err != nil {
			if closedEarly(err) {
				err = errors.Join(errNoAnswer, err)
			}
			return false, fmt.Errorf("read the answer to the probe: %w", err)
		}
		res.Status = resp.StatusCode
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil || resp.Request == nil {
			return false, nil // the answer ended with the connection, or the body was never sent
		}
		// Anything more on the connection is an answer to a request the
		// client never sent: the body, taken for one.
		conn.SetReadDeadline(time.Now().Add(unreadProbeWait))
		if _, err := http.ReadResponse(br, nil); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || closedEarly(err) {
				return false, nil
			}
			return false, fmt.Errorf("after the answer to the probe: %w", err)
		}
		return true, nil
	}
	unread, err := probe(false)
	if err != nil || !unread {
		return res, err
	}
	res.Finding = BodyUnreadKeepAlive
	unread, err = probe(true)
	switch {
	case errors.Is(err, errNoAnswer):
		err = nil // it closes rather than answer: not a request
	case err == nil && unread:
		res.Finding = BodyUnreadAlways
	}
	return res, err
}

// errNoAnswer marks a probe whose connection ended without an answer.
var errNoAnswer = errors.New("the upstream closed the connection without an answer")

// closedEarly reports whether err is the end of the connection.
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection reset")
}

// expectContinue sends req's head with Expect: 100-continue and its body
// (of text body) once the upstream says 100 Continue, or after a second
// without an answer, as net/http's client does; a final answer to the
// head alone comes back with no Request (the body was never sent, and
// the connection is not used again).
func expectContinue(conn net.Conn, br *bufio.Reader, req *http.Request, body string) (*http.Response, error) {
	var h strings.Builder
	fmt.Fprintf(&h, "PUT %s HTTP/1.1\r\nHost: %s\r\n", req.URL.RequestURI(), req.URL.Host)
	req.Header.Write(&h)
	fmt.Fprintf(&h, "Expect: 100-continue\r\nContent-Length: %d\r\n", len(body))
	if req.Close {
		h.WriteString("Connection: close\r\n")
	}
	h.WriteString("\r\n")
	if _, err := io.WriteString(conn, h.String()); err != nil {
		return nil, fmt.Errorf("send the probe: %w", err)
	}
	conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err := br.Peek(1)
	if d, ok := req.Context().Deadline(); ok {
		conn.SetReadDeadline(d)
	} else {
		conn.SetReadDeadline(time.Time{})
	}
	var ne net.Error
	switch {
	case err == nil:
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusContinue {
			resp.Request = nil // answered from the head: the body is not sent
			return resp, nil
		}
	case !errors.As(err, &ne) || !ne.Timeout():
		return nil, err
	}
	if _, err := io.WriteString(conn, body); err != nil {
		return nil, fmt.Errorf("send the probe's body: %w", err)
	}
	return http.ReadResponse(br, req)
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
