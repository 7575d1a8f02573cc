package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// rawClient is the lean load generator of the http/raw runner: one
// keep-alive HTTP/1.1 connection per client, each call one write of the
// whole request and one read of the answer on the calling goroutine, the
// JSON built and read by hand. It is to the coordinator's HTTP API what
// pgbench (C, libpq, one connection per client) is to PostgreSQL: a
// client that costs the shared cores as little as it can, so that the
// comparison is between the servers. The http runner uses the Go client
// (coordinator/client: net/http Transport, encoding/json) instead.
type rawClient struct {
	host string
	conn net.Conn
	r    *bufio.Reader
	req  []byte // request being built
	body []byte // last answer's body
}

func dialRaw(addr string) (*rawClient, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawClient{host: addr, conn: c, r: bufio.NewReaderSize(c, 4096)}, nil
}

func (c *rawClient) close() { c.conn.Close() }

// post sends a JSON body (built by fill into the buffer it is given) to
// path and reads the answer's body into c.body; an answer other than 200 is
// an error.
func (c *rawClient) post(path string, fill func([]byte) []byte) error {
	body := fill(make([]byte, 0, 160))
	b := append(c.req[:0], "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	c.req = b
	if _, err := c.conn.Write(b); err != nil {
		return err
	}
	return c.readAnswer()
}

func (c *rawClient) readAnswer() error {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	ok := bytes.HasPrefix(line, []byte("HTTP/1.1 200 "))
	status := string(bytes.TrimSpace(line))
	n := -1
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(h) <= 2 {
			break
		}
		if k, v, found := bytes.Cut(h, []byte(":")); found && bytes.EqualFold(k, []byte("Content-Length")) {
			if n, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return fmt.Errorf("bad Content-Length %q", v)
			}
		}
	}
	if n < 0 {
		return errors.New("answer without Content-Length")
	}
	if cap(c.body) < n {
		c.body = make([]byte, n)
	}
	c.body = c.body[:n]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s: %s", status, bytes.TrimSpace(c.body))
	}
	return nil
}

// jsonInt returns the integer field name of the answer's body.
func (c *rawClient) jsonInt(name string) (int64, error) {
	key := `"` + name + `":`
	i := bytes.Index(c.body, []byte(key))
	if i < 0 {
		return 0, fmt.Errorf("no %s in %s", name, c.body)
	}
	rest := c.body[i+len(key):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	return strconv.ParseInt(string(rest[:j]), 10, 64)
}

// appendJSONString appends s as a JSON string; the benchmark's names need
// no escaping.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func (c *rawClient) acquireRelease(resource, owner, ttl string) error {
	if err := c.post("/v1/leases/acquire", func(b []byte) []byte {
		b = append(b, `{"resource":`...)
		b = appendJSONString(b, resource)
		b = append(b, `,"owner":`...)
		b = appendJSONString(b, owner)
		b = append(b, `,"ttl":`...)
		b = appendJSONString(b, ttl)
		return append(b, '}')
	}); err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	tok, err := c.jsonInt("token")
	if err != nil {
		return err
	}
	if err := c.post("/v1/leases/release", func(b []byte) []byte {
		b = append(b, `{"resource":`...)
		b = appendJSONString(b, resource)
		b = append(b, `,"owner":`...)
		b = appendJSONString(b, owner)
		b = append(b, `,"token":`...)
		b = strconv.AppendInt(b, tok, 10)
		return append(b, '}')
	}); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if !bytes.Contains(c.body, []byte(`"released":true`)) {
		return fmt.Errorf("release of token %d: %s", tok, c.body)
	}
	return nil
}

func (c *rawClient) renew(resource, owner string, token int64, ttl string) error {
	if err := c.post("/v1/leases/renew", func(b []byte) []byte {
		b = append(b, `{"resource":`...)
		b = appendJSONString(b, resource)
		b = append(b, `,"owner":`...)
		b = appendJSONString(b, owner)
		b = append(b, `,"token":`...)
		b = strconv.AppendInt(b, token, 10)
		b = append(b, `,"ttl":`...)
		b = appendJSONString(b, ttl)
		return append(b, '}')
	}); err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	return nil
}
