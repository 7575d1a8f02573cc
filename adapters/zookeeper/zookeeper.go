// Package zookeeper verifies fencing tokens issued by ZooKeeper's lock
// recipe (Curator's InterProcessMutex, the recipe in the ZooKeeper docs): a
// worker holding the lock at path resource.LockName(path, key) sends its
// lock node's czxid (the zxid of the transaction that created it) as its
// Fencing-Token, and Source checks with the ensemble that the node of that
// czxid is the lock's holder when the token is first seen.
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
	"strconv"
	"strings"
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

// VerifyToken implements gateway.TokenVerifier: token must be the czxid of
// the lock's holder as the recipe decides it: of the children of the lock
// path named in the recipe's way (…lock-NNNNNNNNNN: Curator, go-zookeeper
// and the ZooKeeper docs; …__lock__NNNNNNNNNN: kazoo), the one with the
// lowest sequence number, and an ephemeral node. That is the sender
// holding the lock now: a waiter's node, a child outside the recipe, or a
// persistent node proves no more than that the number belongs to the
// lock, and a fence raised to a waiter's number would refuse the holder
// for the rest of its session.
//
// The server the gateway is connected to may lag the leader, so anything
// but the holder is read again after a sync. A released holder's later
// writes never come here while the fence holds its token (a repeated token
// is not verified): the fence decides them. ZooKeeper keeps no record of
// deleted nodes, so a holder whose first write arrives after its node was
// deleted is refused as unknown.
func (s *Source) VerifyToken(ctx context.Context, res string, token int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	lock := resource.LockName(s.path, res)
	err := s.holds(ctx, lock, token)
	var refusal *fencegate.Error
	if errors.Is(err, errNotFound) || errors.As(err, &refusal) {
		if _, err = call(ctx, func() (string, error) { return s.conn.Sync(lock) }); err == nil || errors.Is(err, zk.ErrNoNode) {
			err = s.holds(ctx, lock, token)
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotFound):
		return &fencegate.UnknownTokenError{Resource: res, Token: token,
			Why: fmt.Sprintf("token %d is not the czxid of a ZooKeeper lock node of %s", token, res)}
	case errors.As(err, &refusal):
		refusal.Resource = res
		return refusal
	}
	return &fencegate.TokenSourceUnavailableError{Source: "ZooKeeper", Resource: res, Token: token, Err: err}
}

// errNotFound: no child of the lock path has the token as its czxid.
var errNotFound = errors.New("no lock node with this czxid")

// seq returns the sequence number of a lock node named in the recipe's
// way, or false for any other name (a nested lock's path, a stray node).
func seq(name string) (int64, bool) {
	for _, mark := range []string{"lock-", "__lock__"} {
		i := strings.LastIndex(name, mark)
		if i < 0 {
			continue
		}
		digits := name[i+len(mark):]
		if len(digits) != 10 || strings.Trim(digits, "0123456789") != "" {
			continue
		}
		n, err := strconv.ParseInt(digits, 10, 64)
		if err == nil {
			return n, true
		}
	}
	return 0, false
}

// holds returns nil if the lowest lock node of lock is ephemeral with
// czxid token, a not_lock_holder refusal (Resource unset) if the token is
// another child's czxid, errNotFound if no child's. The common case, the
// holder writing, costs two reads: the children, and the lowest one's
// stat.
func (s *Source) holds(ctx context.Context, lock string, token int64) error {
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
	lowest, low := "", int64(-1)
	for _, c := range children {
		if n, ok := seq(c); ok && (low < 0 || n < low) {
			lowest, low = c, n
		}
	}
	if lowest != "" {
		st, err := call(ctx, func() (*zk.Stat, error) {
			_, st, err := s.conn.Exists(lock + "/" + lowest)
			return st, err
		})
		if err != nil {
			return err
		}
		if st != nil && st.Czxid == token && st.EphemeralOwner != 0 {
			return nil
		}
	}
	// Not the holder: find the token's node to say why.
	name, st, err := s.find(ctx, lock, children, token)
	if err != nil {
		return err
	}
	why := fmt.Sprintf("ZooKeeper node %s/%s (czxid %d) ", lock, name, token)
	switch _, named := seq(name); {
	case !named && st.EphemeralOwner == 0:
		// The path of a lock nested below (/orders/7/items): no lock
		// node of this lock at all.
		return errNotFound
	case !named:
		why += "is not a lock node of the recipe (…lock-NNNNNNNNNN)"
	case st.EphemeralOwner == 0:
		why += "is not ephemeral: the lock recipe did not create it"
	default:
		why += "is waiting for the lock; the holder is " + lock + "/" + lowest
	}
	return gateway.NotLockHolder("", token, why)
}

// find looks for the child of lock with czxid token. ZooKeeper cannot be
// asked for a node by czxid: each child's stat is read, all at once (the
// client pipelines them on its one connection).
func (s *Source) find(ctx context.Context, lock string, children []string, token int64) (string, *zk.Stat, error) {
	type result struct {
		name string
		st   *zk.Stat
		err  error
	}
	results := make(chan result, len(children))
	var wg sync.WaitGroup
	for _, c := range children {
		wg.Go(func() {
			_, st, err := s.conn.Exists(lock + "/" + c)
			results <- result{c, st, err}
		})
	}
	var firstErr error
	for range children {
		select {
		case r := <-results:
			if r.err == nil && r.st != nil && r.st.Czxid == token {
				return r.name, r.st, nil
			}
			if r.err != nil && firstErr == nil {
				firstErr = r.err
			}
		case <-ctx.Done():
			return "", nil, ctx.Err()
		}
	}
	if firstErr != nil {
		return "", nil, firstErr
	}
	return "", nil, errNotFound
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
