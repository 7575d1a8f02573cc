// Package etcd verifies fencing tokens issued by etcd's lock recipe
// (go.etcd.io/etcd/client/v3/concurrency.Mutex, `etcdctl lock`): a worker
// holding the lock named resource.LockName(prefix, key) sends its lock key's
// create revision as its Fencing-Token, and Source checks with etcd that a
// lock key of that lock was created at that revision.
//
// Revisions are one counter for the whole cluster, raised by every write,
// and the recipe grants the lock in the order of its keys' create
// revisions: a later holder's key was created after, so its revision is
// strictly greater. The gateway's compare then needs nothing else; the
// check here keeps a forged number, or one of another lock, from raising a
// fence.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
)

// Options configure New.
type Options struct {
	// Endpoints are the cluster's client URLs.
	Endpoints []string
	// Prefix is the prefix of lock names (resource.LockName).
	Prefix string
	// Username and Password, if set, authenticate to etcd.
	Username, Password string
	// Timeout bounds one verification or Ping. Zero: 2s.
	Timeout time.Duration
}

// Source is one etcd cluster as a source of fencing tokens.
type Source struct {
	client  *clientv3.Client
	prefix  string
	timeout time.Duration
}

var _ gateway.TokenVerifier = (*Source)(nil)

// New returns a Source for the cluster of opts. It does not wait for the
// cluster: while etcd cannot be reached, verifications fail closed and Ping
// reports it.
func New(opts Options) (*Source, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: opts.Endpoints,
		Username:  opts.Username,
		Password:  opts.Password,
		// The client's own retries log at warn on every failed attempt;
		// refusals and /readyz report the outage instead.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return &Source{client: c, prefix: opts.Prefix, timeout: opts.Timeout}, nil
}

// VerifyToken implements gateway.TokenVerifier: token must be the create
// revision of a key directly under the lock of resource (the recipe's
// name + "/" + lease ID), one that exists now (the holder's, or a
// waiter's) or existed at that revision (a lock since released). The
// first read finds the common case, a holder writing; the second, at the
// token's revision, exists for a write that arrives after its lock was
// released, and fails for a revision etcd has compacted away.
func (s *Source) VerifyToken(ctx context.Context, res string, token int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	dir := resource.LockName(s.prefix, res) + "/"
	found, err := s.created(ctx, dir, token, 0)
	if err == nil && !found {
		found, err = s.created(ctx, dir, token, token)
	}
	switch {
	case errors.Is(err, rpctypes.ErrFutureRev), errors.Is(err, rpctypes.ErrCompacted):
		// A revision etcd has not reached cannot be a lock key's.
	case err != nil:
		return &fencegate.TokenSourceUnavailableError{Source: "etcd", Resource: res, Token: token, Err: err}
	case found:
		return nil
	}
	return &fencegate.UnknownTokenError{Resource: res, Token: token,
		Why: fmt.Sprintf("token %d is not the create revision of an etcd lock key of %s", token, res)}
}

// created reports whether a key directly under dir has create revision
// token, read at revision rev (0: the current one). etcd filters by create
// revision itself, so only matching keys travel.
func (s *Source) created(ctx context.Context, dir string, token, rev int64) (bool, error) {
	resp, err := s.client.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMinCreateRev(token), clientv3.WithMaxCreateRev(token), clientv3.WithRev(rev))
	if err != nil {
		return false, err
	}
	for _, kv := range resp.Kvs {
		// A key deeper down belongs to another lock (/orders/7/items).
		if kv.CreateRevision == token && !strings.Contains(string(kv.Key[len(dir):]), "/") {
			return true, nil
		}
	}
	return false, nil
}

// Ping reports whether a linearizable read succeeds (a quorum of the
// cluster answers), for /readyz.
func (s *Source) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.client.Get(ctx, s.prefix, clientv3.WithCountOnly())
	return err
}

// Close closes the connections to the cluster.
func (s *Source) Close() error { return s.client.Close() }
