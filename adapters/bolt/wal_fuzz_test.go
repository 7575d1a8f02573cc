package bolt

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord: the advance-log decoder stands in for a database's WAL
// reader, so random bytes must never panic it, and every record it accepts
// must be exactly what the writer would have written for it (its checksum
// and framing hold): nothing it returns is a record that fails its check.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []walRecord{
		{lsn: 1, token: 5, at: 1, resource: "/orders/7", owner: "worker-a"},
		{lsn: 9, prev: 8, token: 1 << 62, at: -1, resource: "r", owner: ""},
		{lsn: 10, prev: 9}, // a mark
	} {
		b := r.appendTo(nil)
		f.Add(b, false)
		f.Add(b[:len(b)-1], false)
		f.Add(append(b, make([]byte, 16)...), false)
	}
	f.Add([]byte{0, 0, 0, 30, 1, 2, 3, 4}, true)
	f.Fuzz(func(t *testing.T, data []byte, noPrev bool) {
		format := formatCurrent
		if noPrev {
			format = formatNoPrev
		}
		r, n, err := decodeRecord(data, format)
		if err != nil || n == 0 {
			return
		}
		if n > len(data) {
			t.Fatalf("record size %d past the %d bytes", n, len(data))
		}
		if format == formatCurrent {
			if again := r.appendTo(nil); !bytes.Equal(again, data[:n]) {
				t.Fatalf("accepted record %+v does not re-encode to its bytes:\n%x\n%x", r, data[:n], again)
			}
		}
	})
}

// FuzzSegment: a whole segment of random bytes (a damaged disk) goes
// through the replay's reading steps without a panic, and the records
// found past any damage are valid ones.
func FuzzSegment(f *testing.F) {
	seg := segmentHeader(3, 4096)
	seg = walRecord{lsn: 1, token: 5, resource: "/a", owner: "o"}.appendTo(seg)
	seg = walRecord{lsn: 2, prev: 1, token: 6, resource: "/b", owner: "o"}.appendTo(seg)
	f.Add(seg)
	f.Add(seg[:40])
	f.Add(append(seg[:segHeaderSize:segHeaderSize], seg[segHeaderSize+3:]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		format, off, _, err := parseSegmentHeader(data)
		if err != nil {
			return
		}
		var read uint64
		for {
			r, n, _ := decodeRecord(data[off:], format)
			if n == 0 || r.lsn <= read {
				break
			}
			read, off = r.lsn, off+n
		}
		scanAfter(data, off, format, read, func(r walRecord) {
			if r.lsn <= read {
				t.Fatalf("scan returned lsn %d at or below %d", r.lsn, read)
			}
		})
	})
}
