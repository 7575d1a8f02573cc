package bolt

import (
	"hash/maphash"
	"sync/atomic"

	bbolt "go.etcd.io/bbolt"
)

// keyFilter is a Bloom filter of the resources that have a fence record in
// bbolt. A resource it does not hold has none, so its record is what the
// log's pending overlay says (or nothing), and reading it needs no bbolt
// transaction: the read of a new resource before its advance, the log
// writer's read of the current records, and a checkpoint's read before it
// writes. A resource it holds may still be absent (a few percent at 8
// records per 64 bits, far fewer below): that costs the bbolt read, as
// before.
//
// It is exact in the direction that matters because every write of a
// fence record goes through putFence, which adds the key before the
// transaction commits, and the filter starts from a scan of the file at
// Open. A key absent from it was never checkpointed, so its pending entry,
// if any, is above the checkpoint position and is the record.
//
// It never shrinks (records are never deleted) and is sized at Open for 32
// bits per record then present (at least 1 MiB); a store that grows far
// beyond that sends more reads to bbolt until it is opened again.
type keyFilter struct {
	seed  maphash.Seed
	words []atomic.Uint64
	mask  uint64 // len(words) - 1 (a power of two)
}

// newKeyFilter returns a filter holding the keys of bucket b.
func newKeyFilter(b *bbolt.Bucket) *keyFilter {
	f := &keyFilter{seed: maphash.MakeSeed()}
	var hashes []uint64
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		hashes = append(hashes, maphash.Bytes(f.seed, k))
	}
	n := uint64(1 << 17) // words: 1 MiB
	for 64*n < 32*uint64(len(hashes)) {
		n <<= 1
	}
	f.words, f.mask = make([]atomic.Uint64, n), n-1
	for _, h := range hashes {
		f.words[h&f.mask].Or(bits(h))
	}
	return f
}

// bits returns the four bits a key with hash h sets in its word, which the
// low bits of h choose (a blocked Bloom filter: one cache line per lookup).
func bits(h uint64) uint64 {
	return 1<<(h>>40&63) | 1<<(h>>46&63) | 1<<(h>>52&63) | 1<<(h>>58)
}

func (f *keyFilter) add(key string) {
	h := maphash.String(f.seed, key)
	f.words[h&f.mask].Or(bits(h))
}

// mayHave reports whether bbolt may hold a fence record of key; false means
// it certainly does not.
func (f *keyFilter) mayHave(key string) bool {
	h := maphash.String(f.seed, key)
	b := bits(h)
	return f.words[h&f.mask].Load()&b == b
}
