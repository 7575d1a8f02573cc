package relay

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestLargeSteps: a streamed body arrives whole and in order, in writes of
// at most StreamStep, and a body cut short fails with its own error.
func TestLargeSteps(t *testing.T) {
	body := make([]byte, 3*StreamStep+17)
	for i := range body {
		body[i] = byte(i * 7)
	}
	var got writes
	n, err := largeSteps{io.NopCloser(iotest.HalfReader(bytes.NewReader(body)))}.WriteTo(&got)
	if err != nil || n != int64(len(body)) || !bytes.Equal(got.b, body) {
		t.Fatalf("WriteTo = %d, %v; got %d bytes equal %v; want %d", n, err, len(got.b), bytes.Equal(got.b, body), len(body))
	}
	if got.max != StreamStep || got.n != 4 {
		t.Fatalf("%d writes of at most %d bytes; want 4 of at most %d", got.n, got.max, StreamStep)
	}

	cut := io.MultiReader(bytes.NewReader(body[:1000]), iotest.ErrReader(io.ErrUnexpectedEOF))
	n, err = largeSteps{io.NopCloser(cut)}.WriteTo(&writes{})
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != 1000 {
		t.Fatalf("body cut short: WriteTo = %d, %v; want 1000, unexpected EOF", n, err)
	}
}

type writes struct {
	b      []byte
	n, max int
}

func (w *writes) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	w.n++
	w.max = max(w.max, len(p))
	return len(p), nil
}
