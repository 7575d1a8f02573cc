package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// ToxiproxyServer is a running toxiproxy-server; its API is plain HTTP+JSON.
type ToxiproxyServer struct {
	URL string // API base, http://127.0.0.1:PORT
}

// Toxiproxy starts toxiproxy-server on 127.0.0.1 and stops it at the
// end of the test.
func Toxiproxy(t testing.TB) *ToxiproxyServer {
	t.Helper()
	bin := tool(t, "toxiproxy-server", "toxiproxy")
	_, ports := startServer(t, "toxiproxy", 1, nil, bin,
		func(p []int) []string { return []string{"-host", "127.0.0.1", "-port", strconv.Itoa(p[0])} },
		func(ctx context.Context, p *process, ports []int) error {
			return waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/version", ports[0]), 30*time.Second, p.done)
		})
	return &ToxiproxyServer{URL: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
}

// Proxy is one TCP proxy: connect to Listen instead of the upstream.
type Proxy struct {
	Name     string
	Listen   string // 127.0.0.1:PORT
	Upstream string
	tp       *ToxiproxyServer
}

// Toxic is a toxiproxy toxic; see https://github.com/Shopify/toxiproxy#toxics.
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`   // latency, timeout, bandwidth, reset_peer, ...
	Stream     string         `json:"stream"` // "downstream" (to the client, the default) or "upstream"
	Toxicity   float64        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// Proxy creates an enabled proxy named name to upstream (host:port) listening
// on a free 127.0.0.1 port.
func (tp *ToxiproxyServer) Proxy(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	var out struct {
		Listen string `json:"listen"`
	}
	tp.call(t, http.MethodPost, "/proxies", map[string]any{
		"name": name, "listen": "127.0.0.1:0", "upstream": upstream, "enabled": true,
	}, &out)
	return &Proxy{Name: name, Listen: out.Listen, Upstream: upstream, tp: tp}
}

// AddToxic adds a toxic to the proxy. Zero Toxicity means 1 (always), empty
// Stream means downstream.
func (p *Proxy) AddToxic(t testing.TB, tx Toxic) {
	t.Helper()
	if tx.Toxicity == 0 {
		tx.Toxicity = 1
	}
	if tx.Stream == "" {
		tx.Stream = "downstream"
	}
	p.tp.call(t, http.MethodPost, "/proxies/"+p.Name+"/toxics", tx, nil)
}

// AddLatency delays all data to the client by d; returns the toxic's name.
func (p *Proxy) AddLatency(t testing.TB, d time.Duration) string {
	t.Helper()
	name := "latency_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p.AddToxic(t, Toxic{Name: name, Type: "latency", Attributes: map[string]any{"latency": d.Milliseconds()}})
	return name
}

// AddTimeout stops all data and closes the connection after d (d = 0: never
// closes, the connection just hangs); returns the toxic's name.
func (p *Proxy) AddTimeout(t testing.TB, d time.Duration) string {
	t.Helper()
	name := "timeout_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p.AddToxic(t, Toxic{Name: name, Type: "timeout", Attributes: map[string]any{"timeout": d.Milliseconds()}})
	return name
}

// RemoveToxic removes the named toxic.
func (p *Proxy) RemoveToxic(t testing.TB, name string) {
	t.Helper()
	p.tp.call(t, http.MethodDelete, "/proxies/"+p.Name+"/toxics/"+name, nil, nil)
}

// SetEnabled enables or disables the proxy; disabling closes every connection
// and refuses new ones, like the upstream going down.
func (p *Proxy) SetEnabled(t testing.TB, enabled bool) {
	t.Helper()
	p.tp.call(t, http.MethodPost, "/proxies/"+p.Name, map[string]any{"enabled": enabled}, nil)
}

func (tp *ToxiproxyServer) call(t testing.TB, method, path string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("testenv: toxiproxy: %v", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, tp.URL+path, body)
	if err != nil {
		t.Fatalf("testenv: toxiproxy: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("testenv: toxiproxy %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("testenv: toxiproxy %s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("testenv: toxiproxy %s %s: decode %q: %v", method, path, b, err)
		}
	}
}
