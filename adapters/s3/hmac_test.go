package s3

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// hmacSHA256Sum is crypto/hmac's HMAC-SHA256 for keys shorter and longer
// than SHA-256's block and messages on both sides of its stack buffer.
func TestHMACSHA256Sum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kl := range []int{0, 1, 32, 63, 64, 65, 200} {
		for _, ml := range []int{0, 1, 55, 64, 150, 447, 448, 449, 2048} {
			key, msg := make([]byte, kl), make([]byte, ml)
			for i := range key {
				key[i] = byte(rng.Uint32())
			}
			for i := range msg {
				msg[i] = byte(rng.Uint32())
			}
			m := hmac.New(sha256.New, key)
			m.Write(msg)
			got := hmacSHA256Sum(key, msg)
			if want := m.Sum(nil); !bytes.Equal(got[:], want) {
				t.Errorf("key %d bytes, message %d: %x; want %x", kl, ml, got, want)
			}
		}
	}
}

// The HMAC of every verified request and upstream signature allocates
// nothing: the buffers its message is built in stay on the stack
// (crypto/hmac's hash.Hash moved the callers' 2 KiB buffers to the heap).
func TestHMACSHA256SumAllocates(t *testing.T) {
	key, msg := make([]byte, 32), make([]byte, 150)
	if n := testing.AllocsPerRun(100, func() { hmacSHA256Sum(key, msg) }); n != 0 {
		t.Fatalf("%v allocations per HMAC; want none", n)
	}
}
