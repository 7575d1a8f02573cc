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

// FuzzSegment: a segment of records the writer wrote, then damaged (a
// byte flipped, the tail cut: a torn write or a bad disk), goes through the
// replay's reading steps. The sequential read returns exactly the records
// written before the damage, in order, and every one of them (it stops
// nowhere early); the scan past the damage finds only records that were
// written, unchanged. A reader that accepted a damaged record, skipped a
// good one, or invented one would replay a fence that was never advanced or
// lose one that was. Resource and owner names are printable, as the
// gateway's keys are (no NUL or control bytes), so a name cannot itself
// hold a record's framing.
func FuzzSegment(f *testing.F) {
	f.Add(uint8(5), []byte("orders/7"), uint16(60), byte(0x40), uint16(0))
	f.Add(uint8(3), []byte("a"), uint16(0), byte(0), uint16(17))
	f.Add(uint8(9), []byte("k/b/c"), uint16(200), byte(1), uint16(3))
	f.Fuzz(func(t *testing.T, n uint8, names []byte, at uint16, flip byte, cut uint16) {
		var written []walRecord
		seg := segmentHeader(3, 4096)
		var ends []int // where each record ends in seg
		for i := range int(n%32) + 1 {
			name := printable(names, i)
			r := walRecord{lsn: uint64(i + 1), prev: uint64(i), token: int64(i*7 + 1), at: int64(i), resource: name, owner: printable(names, i+1)}
			if i%5 == 4 {
				r.resource, r.owner = "", "" // a mark
			}
			written = append(written, r)
			seg = r.appendTo(seg)
			ends = append(ends, len(seg))
		}
		damaged := len(seg) // the first byte that differs from what was written
		if flip != 0 {
			pos := segHeaderSize + int(at)%(len(seg)-segHeaderSize)
			seg[pos] ^= flip
			damaged = pos
		}
		if c := int(cut) % (len(seg) - segHeaderSize + 1); c > 0 {
			seg = seg[:len(seg)-c]
			damaged = min(damaged, len(seg))
		}
		format, off, _, err := parseSegmentHeader(seg)
		if err != nil || format != formatCurrent {
			t.Fatalf("header: %v, format %d", err, format)
		}
		var read uint64
		var got []walRecord
		for {
			r, size, _ := decodeRecord(seg[off:], format)
			if size == 0 || r.lsn <= read {
				break
			}
			got = append(got, r)
			read, off = r.lsn, off+size
		}
		for i, r := range got {
			if r != written[i] {
				t.Fatalf("record %d read as %+v; written %+v", i, r, written[i])
			}
		}
		intact := 0 // records wholly before the damage
		for intact < len(ends) && ends[intact] <= damaged {
			intact++
		}
		if len(got) < intact {
			t.Fatalf("read %d records; %d were intact before the damage at byte %d", len(got), intact, damaged)
		}
		scanAfter(seg, off, format, read, func(r walRecord) {
			if r.lsn == 0 || r.lsn > uint64(len(written)) || r != written[r.lsn-1] {
				t.Fatalf("scan past the damage found %+v, which was never written", r)
			}
		})
	})
}

// printable derives a printable name from the fuzzer's bytes.
func printable(b []byte, i int) string {
	out := make([]byte, 0, len(b))
	for j, c := range b {
		out = append(out, ' '+(c+byte(i*j))%95)
	}
	return string(out)
}
