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
// writes. A resource it holds may still be absent (about 2% of them): that
// costs the bbolt read, as before.
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
	seed maphash.Seed
	bits []atomic.Uint64
	mask uint64 // the number of bits - 1 (a power of two)
}

// filterHashes is the number of bits per key.
const filterHashes = 4

// newKeyFilter returns a filter holding the keys of bucket b.
func newKeyFilter(b *bbolt.Bucket) *keyFilter {
	f := &keyFilter{seed: maphash.MakeSeed()}
	var hashes []uint64
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		hashes = append(hashes, maphash.Bytes(f.seed, k))
	}
	n := uint64(1 << 23)
	for n < 32*uint64(len(hashes)) {
		n <<= 1
	}
	f.bits, f.mask = make([]atomic.Uint64, n/64), n-1
	for _, h := range hashes {
		f.addHash(h)
	}
	return f
}

func (f *keyFilter) add(key string) { f.addHash(maphash.String(f.seed, key)) }

// addHash sets the key's bits: filterHashes bits derived from one 64-bit
// hash (Kirsch and Mitzenmacher, "Less Hashing, Same Performance").
func (f *keyFilter) addHash(h uint64) {
	h1, h2 := h, h>>32|1
	for i := range uint64(filterHashes) {
		bit := (h1 + i*h2) & f.mask
		f.bits[bit/64].Or(1 << (bit % 64))
	}
}

// mayHave reports whether bbolt may hold a fence record of key; false means
// it certainly does not.
func (f *keyFilter) mayHave(key string) bool {
	h := maphash.String(f.seed, key)
	h1, h2 := h, h>>32|1
	for i := range uint64(filterHashes) {
		bit := (h1 + i*h2) & f.mask
		if f.bits[bit/64].Load()&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}
