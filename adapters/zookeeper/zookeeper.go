// Package zookeeper verifies fencing tokens issued by ZooKeeper's lock
// recipe (Curator's InterProcessMutex, the recipe in the ZooKeeper docs): a
// worker holding the lock at path resource.LockName(path, key) sends its
// lock node's czxid (the zxid of the transaction that created it) as its
// Fencing-Token, and Source checks with the ensemble that a lock node of
// that lock has that czxid.
//
// zxids order every transaction of the ensemble, and the recipe grants the
// lock in the order of its nodes' sequence numbers, which the leader
// assigns in the same order: a later holder's node was created after, so
// its czxid is strictly greater. A czxid carries the leader's epoch in its
// high 32 bits, so one leader election raises it by more than 2^32: the
// reason a verified token is exempt from fence.max_advance.
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
)

// Options configure New.
type Options struct {
	// Servers are the ensemble's host:port addresses.
	Servers []string
	// Path is the prefix of lock paths (resource.LockName).
	Path string
	// SessionTimeout is the gateway's session with the ensemble. Zero: 10s.
	SessionTimeout time.Duration
	// Timeout bounds one verification or Ping. Zero: 2s.
	Timeout time.Duration
}

// Source is one ZooKeeper ensemble as a source of fencing tokens.
type Source struct {
	conn    *zk.Conn
	path    string
	timeout time.Duration
}

var _ gateway.TokenVerifier = (*Source)(nil)

// New returns a Source for the ensemble of opts. It connects in the
// background: while no server can be reached, verifications fail closed
// and Ping reports it.
func New(opts Options) (*Source, error) {
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	conn, _, err := zk.Connect(opts.Servers, opts.SessionTimeout, zk.WithLogger(nopLogger{}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper client: %w", err)
	}
	return &Source{conn: conn, path: opts.Path, timeout: opts.Timeout}, nil
}

type nopLogger struct{}

// Printf drops the client's connection chatter; refusals and /readyz
// report an outage instead.
func (nopLogger) Printf(string, ...any) {}

// errNotFound: no lock node of the resource has the token as its czxid.
var errNotFound = errors.New("no lock node with this czxid")

// VerifyToken implements gateway.TokenVerifier: token must be the czxid of
// an ephemeral child of the lock path of resource, a lock node that exists
// now (the holder's, or a waiter's; ZooKeeper keeps no history of deleted
// nodes). The server the gateway is connected to may lag the leader, so
// a miss is read again after a sync; a hit never needs one (a node seen
// was created).
func (s *Source) VerifyToken(ctx context.Context, res string, token int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	lock := resource.LockName(s.path, res)
	err := s.find(ctx, lock, token)
	if errors.Is(err, errNotFound) {
		if _, err = call(ctx, func() (string, error) { return s.conn.Sync(lock) }); err == nil || errors.Is(err, zk.ErrNoNode) {
			err = s.find(ctx, lock, token)
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotFound):
		return &fencegate.UnknownTokenError{Resource: res, Token: token,
			Why: fmt.Sprintf("token %d is not the czxid of a ZooKeeper lock node of %s", token, res)}
	}
	return &fencegate.TokenSourceUnavailableError{Source: "ZooKeeper", Resource: res, Token: token, Err: err}
}

// find looks for a child of lock with czxid token. ZooKeeper cannot be
// asked for a node by czxid: the children are listed and each one's stat
// read, all at once (the client pipelines them on its one connection).
func (s *Source) find(ctx context.Context, lock string, token int64) error {
	children, err := call(ctx, func() ([]string, error) {
		c, _, err := s.conn.Children(lock)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	type result struct {
		czxid int64
		err   error
	}
	results := make(chan result, len(children))
	var wg sync.WaitGroup
	for _, c := range children {
		wg.Go(func() {
			_, st, err := s.conn.Exists(lock + "/" + c)
			if err != nil || st == nil {
				results <- result{err: err}
				return
			}
			if st.EphemeralOwner == 0 {
				// Lock nodes are ephemeral; a persistent child is the
				// path of a lock nested below (/orders/7/items).
				results <- result{}
				return
			}
			results <- result{czxid: st.Czxid}
		})
	}
	var firstErr error
	for range children {
		select {
		case r := <-results:
			if r.err == nil && r.czxid == token {
				return nil
			}
			if r.err != nil && firstErr == nil {
				firstErr = r.err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if firstErr != nil {
		return firstErr
	}
	return errNotFound
}

// call runs f, a call of the ZooKeeper client (which takes no context),
// until ctx ends; f then finishes on its own, bounded by the session.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Ping reports whether the gateway has a session with the ensemble and the
// server answers, for /readyz.
func (s *Source) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if st := s.conn.State(); st != zk.StateHasSession {
		return fmt.Errorf("no ZooKeeper session (%s)", st)
	}
	_, err := call(ctx, func() (bool, error) {
		ok, _, err := s.conn.Exists("/")
		return ok, err
	})
	return err
}

// Close ends the session.
func (s *Source) Close() error {
	s.conn.Close()
	return nil
}
