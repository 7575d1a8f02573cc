package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
	"github.com/fencegate/fencegate/server"
)

// doctorHTTPRoutes runs the racing probe on every plain HTTP route with
// precondition: etag: many concurrent conditional PUTs to one probe object
// under path (default: the route's upstream.check_path), of which exactly
// one may win. It prints one line per route and returns how many it
// checked and how many failed.
func doctorHTTPRoutes(ctx context.Context, cfg *config.Config, path string) (checked, failed int) {
	if cfg.Gateway == nil {
		return 0, 0
	}
	for _, rc := range cfg.Gateway.Routes {
		if rc.Upstream == nil || rc.Precondition != "etag" {
			continue
		}
		p := probePath(rc, path, "")
		if p == "" {
			continue
		}
		checked++
		h, err := relay.New(server.HTTPUpstreamOptions(rc))
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
			err = h.CheckConditionalWrites(cctx, p, 0)
			cancel()
		}
		if err != nil {
			failed++
			fmt.Printf("route %s: FAIL: %v\n", rc.Name, err)
			continue
		}
		fmt.Printf("route %s: ok: %s honours If-Match and If-None-Match on PUT, racing writes included (path %s)\n", rc.Name, config.RedactURL(rc.Upstream.URL), p)
	}
	return checked, failed
}

// doctorUnreadBodies probes every plain HTTP route's upstream for answering
// writes without reading their bodies (relay.ProbeUnreadBodies): PUTs of a
// probe object under path (default: the route's upstream.check_path) whose
// body is itself a request, in the shapes servers commonly answer from the
// head alone (a precondition, no credentials, a missing parent, a
// redirect, an Expect). It prints one line per route and returns how many
// it checked and how many failed. An upstream that honours
// Connection: close passes with a note: the gateway closes every
// connection that carried a body, so its answers stay with their requests
// (unless upstream.keep_alive_writes keeps them: then a shape it answers
// unread fails, but for those with a precondition or an Expect, which go
// with Connection: close on such routes too). An h2c route is checked for
// speaking HTTP/2 over cleartext instead: it frames bodies.
func doctorUnreadBodies(ctx context.Context, cfg *config.Config, path string) (checked, failed int) {
	if cfg.Gateway == nil {
		return 0, 0
	}
	for _, rc := range cfg.Gateway.Routes {
		if rc.Upstream == nil {
			continue
		}
		up := config.RedactURL(rc.Upstream.URL)
		if rc.Upstream.H2C {
			checked++
			if !doctorH2C(ctx, rc, up) {
				failed++
			}
			continue
		}
		p := probePath(rc, path, " unread-body probe")
		if p == "" {
			continue
		}
		checked++
		var tc *tls.Config
		var err error
		if rc.Upstream.TLS != nil {
			tc, err = upstreamconn.TLSConfig(server.UpstreamTLSOptions(rc.Upstream.TLS))
		}
		var probes []relay.UnreadProbe
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
			probes, err = relay.ProbeUnreadBodies(cctx, rc.Upstream.URL, p, rc.Upstream.Headers, tc)
			cancel()
		}
		var always, kept, keptOther []string // the shapes answered unread
		for _, pr := range probes {
			what := fmt.Sprintf("%s: %d", pr.Shape.Name, pr.Status)
			switch pr.Finding {
			case relay.BodyUnreadAlways:
				always = append(always, what)
			case relay.BodyUnreadKeepAlive:
				kept = append(kept, what)
				if !pr.Shape.Shortcut {
					keptOther = append(keptOther, what)
				}
			}
		}
		keep := rc.Upstream.KeepAliveWrites
		switch {
		case err != nil:
			failed++
			fmt.Printf("route %s: FAIL: unread-body probe (path %s): %v\n", rc.Name, p, err)
		case len(always) > 0:
			failed++
			fmt.Printf("route %s: FAIL: %s answers a write without reading its body and then acts on the body as a request of its own, even with Connection: close: a worker's body can carry requests the fence never sees; fix the upstream (read or discard a body it does not want, or close the connection) (path %s; answered unread: %s)\n", rc.Name, up, p, strings.Join(always, "; "))
		case keep && len(keptOther) > 0:
			failed++
			fmt.Printf("route %s: FAIL: %s answers a write without reading its body and takes the body for its next request on a kept connection, and upstream.keep_alive_writes keeps that connection: a worker's body can carry requests the fence never sees, and their answers reach other workers; remove keep_alive_writes (path %s; answered unread: %s)\n", rc.Name, up, p, strings.Join(keptOther, "; "))
		case keep && len(kept) > 0:
			fmt.Printf("route %s: note: %s answers writes with a precondition or an Expect without reading their bodies and takes the body for its next request on a kept connection; upstream.keep_alive_writes sends those writes with Connection: close, which it honours, and keeps the others' connections (path %s; answered unread: %s)\n", rc.Name, up, p, strings.Join(kept, "; "))
		case len(kept) > 0:
			more := ""
			if len(keptOther) == 0 && rc.Upstream.TLS == nil {
				more = "; upstream.keep_alive_writes: true would keep the connections of the other writes (those with a precondition or an Expect still close)"
			}
			fmt.Printf("route %s: note: %s answers a write without reading its body and takes the body for its next request on a kept connection; it honours Connection: close, which the gateway sends with every request that has a body, so through the gateway answers stay with their requests, but clients that reach it directly can be desynchronized (path %s; answered unread: %s)%s\n", rc.Name, up, p, strings.Join(kept, "; "), more)
		case !keep && rc.Upstream.TLS == nil:
			fmt.Printf("route %s: ok: %s reads a write's body (or closes the connection) before its next request (path %s; %d shapes of write probed); upstream.keep_alive_writes: true would keep its connections after writes\n", rc.Name, up, p, len(probes))
		default:
			fmt.Printf("route %s: ok: %s reads a write's body (or closes the connection) before its next request (path %s; %d shapes of write probed)\n", rc.Name, up, p, len(probes))
		}
	}
	return checked, failed
}

// doctorH2C checks that an upstream.h2c route's upstream speaks HTTP/2
// over cleartext with prior knowledge (an OPTIONS of its URL answered over
// HTTP/2; any status will do) and reports whether it does.
func doctorH2C(ctx context.Context, rc config.Route, up string) bool {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	defer cancel()
	tr := upstreamconn.NewH2C(relay.NewTransport(nil))
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(cctx, http.MethodOptions, rc.Upstream.URL, nil)
	var resp *http.Response
	if err == nil {
		resp, err = tr.RoundTrip(req)
	}
	if err != nil {
		fmt.Printf("route %s: FAIL: %s does not speak HTTP/2 over cleartext with prior knowledge (upstream.h2c): %v\n", rc.Name, up, err)
		return false
	}
	resp.Body.Close()
	fmt.Printf("route %s: ok: %s speaks HTTP/2 over cleartext (upstream.h2c; answered %s): bodies are framed, so writes keep their connections\n", rc.Name, up, resp.Status)
	return true
}

// probePath is the path prefix of an HTTP route's probe objects: path, else
// the route's upstream.check_path; "" (and a line saying the probe, what,
// was skipped) if neither is set.
func probePath(rc config.Route, path, what string) string {
	if path == "" {
		path = rc.Upstream.CheckPath
	}
	if path == "" {
		fmt.Printf("route %s: skipped%s (no -path and no upstream.check_path)\n", rc.Name, what)
	}
	return path
}

// doctorDAVRoutes asks every plain HTTP route's upstream for OPTIONS (on
// path, else the route's upstream.check_path or path prefix): one that
// answers with a DAV header speaks WebDAV (RFC 4918 §10.1), where a DELETE
// or MOVE of a collection removes its members and a COPY or MOVE writes
// its Destination. It says what the route (routes[i], compiled) does about
// them: ok, or FAIL naming what is off. Upstreams without DAV, or that do
// not answer, are not counted.
func doctorDAVRoutes(ctx context.Context, cfg *config.Config, routes []*gateway.Route, path string) (checked, failed int) {
	for i, rc := range cfg.Gateway.Routes {
		if rc.Upstream == nil || i >= len(routes) {
			continue
		}
		rt := routes[i]
		p := cmp.Or(path, rc.Upstream.CheckPath, rc.Match.PathPrefix, "/")
		up := config.RedactURL(rc.Upstream.URL)
		dav, err := probeDAV(ctx, rc, p)
		if err != nil {
			fmt.Printf("route %s: note: WebDAV probe (OPTIONS %s on %s): %v\n", rc.Name, p, up, err)
			continue
		}
		if dav == "" {
			continue
		}
		checked++
		var off []string
		if !rt.Hierarchical() {
			off = append(off, "hierarchical is off, so a DELETE or MOVE of a collection is not checked against its members' newer tokens and removes them (remove hierarchical: false)")
		}
		for _, m := range []string{"DELETE", "MOVE", "COPY"} {
			switch {
			case !rt.Fences(m):
				off = append(off, m+" is not fenced (add it to fenced_methods)")
			case m != "DELETE" && !rt.FencesDestination(m):
				off = append(off, "the Destination of a "+m+" is not fenced (destination_methods)")
			}
		}
		if len(off) > 0 {
			failed++
			fmt.Printf("route %s: FAIL: %s speaks WebDAV (DAV: %s): %s\n", rc.Name, up, dav, strings.Join(off, "; "))
			continue
		}
		fmt.Printf("route %s: ok: %s speaks WebDAV (DAV: %s): a DELETE or MOVE of a collection is fenced as a write of its members, and a COPY or MOVE on its Destination too (path %s)\n", rc.Name, up, dav, p)
	}
	return checked, failed
}

// probeDAV sends OPTIONS for path to rc's upstream and returns its DAV
// header ("" if none).
func probeDAV(ctx context.Context, rc config.Route, path string) (string, error) {
	tr := &http.Transport{}
	if rc.Upstream.TLS != nil {
		tc, err := upstreamconn.TLSConfig(server.UpstreamTLSOptions(rc.Upstream.TLS))
		if err != nil {
			return "", err
		}
		tr.TLSClientConfig = tc
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodOptions, strings.TrimSuffix(rc.Upstream.URL, "/")+path, nil)
	if err != nil {
		return "", err
	}
	for k, v := range rc.Upstream.Headers {
		req.Header.Set(k, v)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return strings.Join(resp.Header.Values("DAV"), ", "), nil
}
