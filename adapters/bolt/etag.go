package bolt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/precondition"
	bbolt "go.etcd.io/bbolt"
)

// The ETag bookkeeping of `precondition: etag` (precondition.Store, used by
// the S3 adapter and HTTP routes) lives on the object's fence record: the
// record exists once a write was admitted.
//
// It is kept in memory and written behind, so that a write with a repeated
// token costs no fsync for its ETags either. What makes that safe after a
// crash (docs/design.md, "ETag records written behind"): the first time this
// process records anything for an object, it durably marks the object's
// record unknown in the file, and leaves it so while the object's ETag is
// kept in memory ("owned"). A crash therefore leaves every object this
// process wrote unknown, never naming a version older than the object's:
// its next write re-learns the ETag with a HEAD. Values reach the file only
// when an entry is forgotten (the cache is full, or Close) and for the
// record of a refused write (RecordETagDurable); the entry is then no longer
// owned, and the next record for the object marks it unknown durably again.

var _ precondition.DurableRecorder = (*Store)(nil)

const defaultETagCache = 1 << 16

// etagCache is the in-memory side. Every change of ownership is made, and
// every change to the file is submitted to the committer, under mu: the
// file receives them in the order mu saw them, so a mark submitted after a
// write-back of the same object lands after it.
type etagCache struct {
	mu       sync.Mutex
	m        map[string]*etagEntry
	max      int
	next     uint64 // write-back ids
	closed   bool
	evicting bool
}

type etagEntry struct {
	etag  string
	token int64
	// owned: the file's record of the object is durably unknown, so the
	// entry alone is the record and changes to it need no I/O.
	owned bool
	// back is the id of the write-back that made the entry not owned: the
	// entry is forgotten when that write-back committed, unless another
	// took over or the entry was owned again meanwhile.
	back uint64
}

func (c *etagCache) init(max int) {
	if max <= 0 {
		max = defaultETagCache
	}
	c.m, c.max = make(map[string]*etagEntry), max
}

// LastETag returns the ETag the gateway last recorded for resource.
func (s *Store) LastETag(ctx context.Context, resource string) (string, error) {
	s.etags.mu.Lock()
	if e, ok := s.etags.m[resource]; ok {
		s.etags.mu.Unlock()
		return e.etag, nil
	}
	s.etags.mu.Unlock()
	var r fenceRecord
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		r, err = getFence(tx, resource)
		return err
	})
	if err != nil || r.ETag != fencegate.ETagUnknown {
		return r.ETag, err
	}
	// An unknown record needs no mark before the write (precondition
	// skips it), so the caller forwards on what it read. A read may see a
	// commit whose fsync has not returned yet: owning the record through
	// the committer makes sure the unknown is on disk first.
	if err := s.own(ctx, resource, 0, "", false); err != nil {
		return "", fmt.Errorf("load etag of %q: %w", resource, err)
	}
	return fencegate.ETagUnknown, nil
}

// RecordETag stores etag for resource unless a write with a newer token has
// recorded one already. For an object this process owns (above) it only
// changes memory; otherwise it first marks the file's record unknown,
// fsynced before it returns.
func (s *Store) RecordETag(ctx context.Context, resource string, token int64, etag string) error {
	c := &s.etags
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("record etag of %q: %w", resource, ErrClosed)
	}
	if e, ok := c.m[resource]; ok && e.owned {
		if token >= e.token {
			e.etag, e.token = etag, token
		}
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	if err := s.own(ctx, resource, token, etag, true); err != nil {
		return fmt.Errorf("record etag of %q: %w", resource, err)
	}
	return nil
}

// own marks resource's record unknown in the file, durably, and then owns
// it in memory, recording etag (if set) by the token rule.
func (s *Store) own(ctx context.Context, resource string, token int64, etag string, set bool) error {
	for {
		owned, err := s.ownOnce(ctx, resource, token, etag, set)
		if err != nil || owned {
			return err
		}
	}
}

// ownOnce is one attempt of own. It reports false, having changed nothing
// in memory, when a write-back of resource was submitted after its mark:
// that write-back lands in the file after the mark, so the mark does not
// make the file's record unknown, and own must mark again.
func (s *Store) ownOnce(ctx context.Context, resource string, token int64, etag string, set bool) (bool, error) {
	c := &s.etags
	var disk fenceRecord
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false, ErrClosed
	}
	// Write-backs submitted after this point have ids above mark.
	mark := c.next
	ch := s.commit.submit(func(tx *bbolt.Tx) error {
		var err error
		if disk, err = s.getFenceTx(tx, resource); err != nil {
			return err
		}
		if disk.Highest == 0 {
			return errors.New("no fence record")
		}
		if disk.ETag == fencegate.ETagUnknown && disk.ETagToken >= token {
			return nil
		}
		r := disk
		r.ETag, r.ETagToken = fencegate.ETagUnknown, max(r.ETagToken, token)
		return putFence(tx, s.known, resource, r)
	})
	c.mu.Unlock()
	if err := ch.wait(ctx); err != nil {
		return false, err
	}
	c.mu.Lock()
	e, ok := c.m[resource]
	if ok && !e.owned && e.back > mark {
		c.mu.Unlock()
		return false, nil
	}
	if !ok && c.next > mark {
		// A write-back since the mark may have carried resource and been
		// forgotten; with no entry, every write-back of it has committed,
		// so the file says whether one landed after the mark.
		var now fenceRecord
		err := s.db.View(func(tx *bbolt.Tx) error {
			var err error
			now, err = s.getFenceTx(tx, resource)
			return err
		})
		if err != nil || now.ETag != fencegate.ETagUnknown {
			c.mu.Unlock()
			return false, err
		}
		disk = now
	}
	if !ok {
		// The file's record is the latest (nothing in memory is newer).
		e = &etagEntry{etag: disk.ETag, token: disk.ETagToken}
		c.m[resource] = e
	}
	if set && token >= e.token {
		e.etag, e.token = etag, token
	}
	e.owned = true
	excess := len(c.m) - c.max*7/8
	full := len(c.m) > c.max && !c.evicting
	if full {
		c.evicting = true
	}
	c.mu.Unlock()
	if full {
		err := s.writeBack(ctx, excess, "", 0, "")
		c.mu.Lock()
		c.evicting = false
		c.mu.Unlock()
		return true, err
	}
	return true, nil
}

// RecordETagDurable is RecordETag, on disk before it returns: the record
// of a write the upstream refused keeps refusing the object's next writes
// after a crash too (precondition.DurableRecorder).
func (s *Store) RecordETagDurable(ctx context.Context, resource string, token int64, etag string) error {
	if err := s.writeBack(ctx, 0, resource, token, etag); err != nil {
		return fmt.Errorf("record etag of %q: %w", resource, err)
	}
	return nil
}

// writeBack writes owned entries to the file and forgets them once that
// committed: n of them (any), or, with resource set, that one with etag
// recorded by the token rule first. Entries taken are no longer owned
// from that moment, so a record made meanwhile marks the file unknown
// again, after the write-back (submitted under mu, committed in order).
func (s *Store) writeBack(ctx context.Context, n int, resource string, token int64, etag string) error {
	type back struct {
		resource string
		etag     string
		token    int64
	}
	c := &s.etags
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.next++
	id := c.next
	var backs []back
	take := func(r string, e *etagEntry) {
		e.owned, e.back = false, id
		backs = append(backs, back{r, e.etag, e.token})
	}
	if resource != "" {
		e, ok := c.m[resource]
		if !ok {
			e = &etagEntry{token: token}
			c.m[resource] = e
		}
		if token >= e.token {
			e.etag, e.token = etag, token
		}
		take(resource, e)
	} else {
		for r, e := range c.m {
			if len(backs) >= n {
				break
			}
			if e.owned {
				take(r, e)
			}
		}
	}
	ch := s.commit.submit(func(tx *bbolt.Tx) error {
		for _, b := range backs {
			r, err := s.getFenceTx(tx, b.resource)
			if err != nil {
				return err
			}
			if r.Highest == 0 {
				return fmt.Errorf("no fence record for %q", b.resource)
			}
			if b.token < r.ETagToken {
				continue // a newer write's record (an import)
			}
			r.ETag, r.ETagToken = b.etag, max(r.ETagToken, b.token)
			if err := putFence(tx, s.known, b.resource, r); err != nil {
				return err
			}
		}
		return nil
	})
	c.mu.Unlock()
	err := ch.wait(ctx)
	c.mu.Lock()
	for _, b := range backs {
		if e, ok := c.m[b.resource]; ok && !e.owned && e.back == id && err == nil {
			delete(c.m, b.resource)
		}
	}
	c.mu.Unlock()
	return err
}

// flushETags writes every owned entry to the file (Close).
func (s *Store) flushETags() error {
	c := &s.etags
	c.mu.Lock()
	n := len(c.m)
	c.mu.Unlock()
	err := s.writeBack(context.Background(), n, "", 0, "")
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// etagOf is the recorded ETag of resource as memory knows it.
func (s *Store) etagOf(resource string) (string, bool) {
	s.etags.mu.Lock()
	defer s.etags.mu.Unlock()
	e, ok := s.etags.m[resource]
	if !ok {
		return "", false
	}
	return e.etag, true
}

// forgetETags drops the entries of resources whose records were replaced
// in the file (an import): the file's record is the latest.
func (s *Store) forgetETags(resources []string) {
	s.etags.mu.Lock()
	defer s.etags.mu.Unlock()
	for _, r := range resources {
		delete(s.etags.m, r)
	}
}
