// Package etcd verifies fencing tokens issued by etcd's lock recipe
// (go.etcd.io/etcd/client/v3/concurrency.Mutex, `etcdctl lock`): a worker
// holding the lock named resource.LockName(prefix, key) sends its lock key's
// create revision as its Fencing-Token, and Source checks with etcd that
// the key of that revision owns the lock when the token is first seen.
//
// Revisions are one counter for the whole cluster, raised by every write,
// and the recipe grants the lock in the order of its keys' create
// revisions: a later holder's key was created after, so its revision is
// strictly greater. The gateway's compare then needs nothing else; the
// check here keeps a forged number, another lock's, and a waiter's from
// raising a fence.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
)

// Options configure New.
type Options struct {
	// Client is how to reach the cluster; its DialTimeout is Timeout.
	Client ClientOptions
	// Prefix is the prefix of lock names (resource.LockName).
	Prefix string
	// Timeout bounds one verification or Ping, and one attempt to
	// connect. Zero: 2s.
	Timeout time.Duration
}

// Source is one etcd cluster as a source of fencing tokens.
type Source struct {
	cfg     clientv3.Config
	prefix  string
	timeout time.Duration

	mu      sync.Mutex
	client  *clientv3.Client // nil until a connection (and its login) succeeded
	lastErr error            // of the attempt at lastTry, returned until timeout after it
	lastTry time.Time
	closed  bool
}

var _ gateway.TokenVerifier = (*Source)(nil)

// New returns a Source for the cluster of opts. It does not wait for the
// cluster: while etcd cannot be reached, verifications fail closed and Ping
// reports it. With a username the client logs in when it connects, which
// clientv3.New does before it returns; so the client is made on first use
// and again after a failed attempt, never in New (a gateway started before
// its etcd would otherwise wait for it, or give up).
func New(opts Options) (*Source, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	opts.Client.DialTimeout = opts.Timeout
	cfg, err := ClientConfig(opts.Client)
	if err != nil {
		return nil, err
	}
	return &Source{cfg: cfg, prefix: opts.Prefix, timeout: opts.Timeout}, nil
}

// conn returns the client, making it if no attempt failed within the last
// timeout (callers meanwhile get that attempt's error: one login at a
// time reaches a cluster that is down or refuses it).
func (s *Source) conn() (*clientv3.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, errors.New("etcd token source closed")
	case s.client != nil:
		return s.client, nil
	case s.lastErr != nil && time.Since(s.lastTry) < s.timeout:
		return nil, s.lastErr
	}
	c, err := clientv3.New(s.cfg)
	if err != nil {
		s.lastErr, s.lastTry = Explain(context.Background(), s.cfg, fmt.Errorf("etcd client: %w", err)), time.Now()
		return nil, s.lastErr
	}
	s.client, s.lastErr = c, nil
	return c, nil
}

// VerifyToken implements gateway.TokenVerifier: token must be the create
// revision of the lock's owner, as etcd's Mutex decides it (the key under
// the lock's name with the lowest create revision), directly under the
// lock (the recipe's name + "/" + lease ID) and held by a lease. That is
// the sender holding the lock now: a waiter's key, a key put by hand
// without a lease, or a deleted one (released, expired, given up) proves
// no more than that the number belongs to the lock, and a fence raised to
// a waiter's number would refuse the holder for the rest of its lease.
//
// A released holder's later writes never come here while the fence holds
// its token (a repeated token is not verified): the fence decides them,
// accepted until a newer holder writes and stale after. Only a holder
// whose first write arrives after its key was deleted is refused here
// (not_lock_holder), since etcd cannot say cheaply whether that key ever
// owned the lock.
func (s *Source) VerifyToken(ctx context.Context, res string, token int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	dir := resource.LockName(s.prefix, res) + "/"
	client, err := s.conn()
	if err != nil {
		return s.unavailable(res, token, err)
	}
	// Not WithKeysOnly: etcd 3.7 (seen on 3.7.3) serves a keys-only read
	// from its in-memory index, whose entries carry no lease, so every
	// holder's key would look put by hand. The recipe's keys have empty
	// values: a keys-only read saved nothing anyway.
	resp, err := client.Get(ctx, dir, clientv3.WithFirstCreate()...)
	if err != nil {
		return s.unavailable(res, token, err)
	}
	var owner *mvccpb.KeyValue
	if len(resp.Kvs) == 1 {
		owner = resp.Kvs[0]
		if owner.CreateRevision == token && direct(dir, owner.Key) && owner.Lease != 0 {
			return nil
		}
	}
	if token > resp.Header.Revision {
		return unknown(res, token)
	}
	// Not the holder: say why, which costs one or two more reads.
	kv, err := created(ctx, client, dir, token, 0)
	if err == nil && kv == nil {
		kv, err = created(ctx, client, dir, token, token)
		if err == nil && kv != nil {
			return gateway.NotLockHolder(res, token, fmt.Sprintf(
				"token %d is the create revision of etcd lock key %s, which was deleted (its lock released or expired, or its waiter gave up) before the token's first write reached the gateway: it cannot be proven to have held the lock",
				token, kv.Key))
		}
	}
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		// A revision etcd no longer keeps: it cannot be proven either way.
		return gateway.NotLockHolder(res, token, fmt.Sprintf(
			"token %d is not the create revision of the etcd lock owner of %s, and etcd has compacted that revision away", token, res))
	case err != nil:
		return s.unavailable(res, token, err)
	case kv == nil:
		return unknown(res, token)
	case kv.Lease == 0:
		return gateway.NotLockHolder(res, token, fmt.Sprintf(
			"etcd lock key %s (create revision %d) has no lease: it was not put by the lock recipe", kv.Key, token))
	}
	why := fmt.Sprintf("etcd lock key %s (create revision %d) is waiting for the lock of %s", kv.Key, token, res)
	if owner != nil {
		why += fmt.Sprintf("; the owner is %s (create revision %d)", owner.Key, owner.CreateRevision)
	}
	return gateway.NotLockHolder(res, token, why)
}

func (s *Source) unavailable(res string, token int64, err error) error {
	return &fencegate.TokenSourceUnavailableError{Source: "etcd", Resource: res, Token: token, Err: err}
}

func unknown(res string, token int64) error {
	return &fencegate.UnknownTokenError{Resource: res, Token: token,
		Why: fmt.Sprintf("token %d is not the create revision of an etcd lock key of %s", token, res)}
}

// direct reports whether key is directly under dir: a key deeper down
// belongs to another lock (/orders/7/items).
func direct(dir string, key []byte) bool {
	return !strings.Contains(string(key[len(dir):]), "/")
}

// created returns the key directly under dir with create revision token,
// read at revision rev (0: the current one), or nil. etcd filters by
// create revision itself, so only matching keys travel.
func created(ctx context.Context, client *clientv3.Client, dir string, token, rev int64) (*mvccpb.KeyValue, error) {
	resp, err := client.Get(ctx, dir, clientv3.WithPrefix(), // not keys-only: see VerifyToken
		clientv3.WithMinCreateRev(token), clientv3.WithMaxCreateRev(token), clientv3.WithRev(rev))
	if err != nil {
		return nil, err
	}
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == token && direct(dir, kv.Key) {
			return kv, nil
		}
	}
	return nil, nil
}

// Ping reports whether a linearizable read succeeds (a quorum of the
// cluster answers), for /readyz.
func (s *Source) Ping(ctx context.Context) error {
	client, err := s.conn()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err = client.Get(ctx, s.prefix, clientv3.WithCountOnly())
	// The probe has a deadline of its own; ctx's may be what just ran out.
	return Explain(context.WithoutCancel(ctx), s.cfg, err)
}

// Close closes the connections to the cluster.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.client == nil {
		return nil
	}
	return s.client.Close()
}
