package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lastSegment returns the path of the crash copy's newest segment and its
// bytes.
func lastSegment(t *testing.T, path string) (string, []byte) {
	t.Helper()
	segs := segments(t, path)
	if len(segs) == 0 {
		t.Fatal("no log segment")
	}
	p := segs[len(segs)-1]
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, data
}

// advanceThree raises three resources to 5, one batch per advance (each
// waits for the one before), and waits for the idle mark.
func advanceThree(t *testing.T, st *Store) {
	t.Helper()
	for _, r := range []string{"/a", "/b", "/c"} {
		for tok := int64(1); tok <= 5; tok++ {
			advanceTo(t, st, r, tok)
		}
	}
	time.Sleep(20 * markDelay)
}

func wantDamaged(t *testing.T, path, seg string) {
	t.Helper()
	st, err := Open(path, Options{})
	if err == nil {
		f, _ := st.LoadFence(context.Background(), "/a")
		st.Close()
		t.Fatalf("Open accepted a damaged log (fence /a reads %d)", f.Highest)
	}
	var de *LogDamagedError
	if !errors.Is(err, ErrLogDamaged) || !errors.As(err, &de) {
		t.Fatalf("Open: %v; want ErrLogDamaged", err)
	}
	if de.Segment != seg {
		t.Fatalf("damage reported in %s; want %s", de.Segment, seg)
	}
	for _, want := range []string{seg, "fence salvage-log", "docs/recovery.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}

// A flipped byte in an acknowledged record is not read as the end of the
// log: the records and the mark after it vouch for it, and Open refuses
// the store instead of forgetting acknowledged advances. Salvage then
// opens it with every valid record.
func TestAdvanceLogDamagedRecordRefusesOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(data []byte)
	}{
		{"flipped payload byte", func(data []byte) { data[segHeaderSize+recHeader+20] ^= 0x01 }},
		{"flipped checksum", func(data []byte) { data[segHeaderSize+5] ^= 0x80 }},
		{"zeroed length", func(data []byte) { copy(data[segHeaderSize:], []byte{0, 0, 0, 0}) }},
		{"length too long", func(data []byte) { data[segHeaderSize] = 0x7f }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, filepath.Join(t.TempDir(), "fencegate.db"))
			defer st.Close()
			advanceThree(t, st)
			path := crashCopy(t, st)
			seg, data := lastSegment(t, path)
			tc.damage(data)
			if err := os.WriteFile(seg, data, 0o600); err != nil {
				t.Fatal(err)
			}
			wantDamaged(t, path, seg)

			var rep SalvageReport
			salvaged, err := Open(path, Options{SalvageLog: &rep})
			if err != nil {
				t.Fatalf("salvage: %v", err)
			}
			defer salvaged.Close()
			if len(rep.Damage) == 0 || rep.Records < 13 {
				t.Fatalf("salvage report %+v; want the damage and the 14 undamaged records", rep)
			}
			for _, r := range []string{"/a", "/b", "/c"} {
				// /a's first record (token 1) is the damaged one; 2–5 are valid.
				if h := highest(t, salvaged, r); h != 5 {
					t.Errorf("%s = %d after salvage; want 5", r, h)
				}
			}
		})
	}
}

// One batch of three advances and nothing after it but the mark: a byte
// flipped in its first record is still detected.
func TestAdvanceLogMarkVouchesForLastBatch(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "fencegate.db"))
	defer st.Close()
	batch := []*advance{}
	for _, r := range []string{"/a", "/b", "/c"} {
		batch = append(batch, &advance{resource: r, token: 5, owner: "o", done: make(chan error, 1)})
	}
	st.log.mu.Lock()
	st.log.queue = append(st.log.queue, batch...)
	st.log.cond.Signal()
	st.log.mu.Unlock()
	for _, a := range batch {
		if err := <-a.done; err != nil {
			t.Fatal(err)
		}
	}
	// The three were queued at once, so they are one batch (the writer
	// takes the whole queue); the mark follows as a batch of its own.
	deadline := time.Now().Add(5 * time.Second)
	for st.log.batches.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := st.log.changes.Load(); n != 3 {
		t.Fatalf("%d advances logged; want 3", n)
	}
	path := crashCopy(t, st)
	seg, data := lastSegment(t, path)
	data[segHeaderSize+recHeader+20] ^= 0x01
	os.WriteFile(seg, data, 0o600)
	wantDamaged(t, path, seg)
}

// A torn last batch (its fdatasync never returned: no mark, nothing after
// it) is still the end of the log: the records before it are replayed.
func TestAdvanceLogTornLastBatchOpens(t *testing.T) {
	path := emptyStore(t)
	torn := walRecord{lsn: 3, prev: 2, token: 99, at: 1, resource: "/a", owner: "o"}.appendTo(nil)
	torn[len(torn)-1] ^= 0xff
	// The torn batch's second record reached the disk whole.
	rest := walRecord{lsn: 4, prev: 2, token: 9, at: 1, resource: "/b", owner: "o"}.appendTo(nil)
	writeSegment(t, path, 1, []walRecord{
		{lsn: 1, token: 5, at: 1, resource: "/a", owner: "o"},
		{lsn: 2, prev: 1, token: 4, at: 1, resource: "/b", owner: "o"},
	}, append(torn, rest...))
	st := openStore(t, path)
	defer st.Close()
	if a, b := highest(t, st, "/a"), highest(t, st, "/b"); a != 5 || b != 4 {
		t.Fatalf("/a=%d /b=%d; want 5 and 4", a, b)
	}
}

// A truncated segment, a deleted one and one whose header was overwritten
// are caught: bbolt records which segments exist and their headers their
// size.
func TestAdvanceLogTruncatedOrMissingSegment(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, seg string)
	}{
		{"truncated", func(t *testing.T, seg string) { os.Truncate(seg, segHeaderSize+100) }},
		{"truncated to nothing", func(t *testing.T, seg string) { os.Truncate(seg, 0) }},
		{"deleted", func(t *testing.T, seg string) { os.Remove(seg) }},
		{"header zeroed", func(t *testing.T, seg string) {
			f, _ := os.OpenFile(seg, os.O_WRONLY, 0)
			f.WriteAt(make([]byte, segHeaderSize), 0)
			f.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, filepath.Join(t.TempDir(), "fencegate.db"))
			defer st.Close()
			advanceThree(t, st)
			path := crashCopy(t, st)
			seg, _ := lastSegment(t, path)
			tc.damage(t, seg)
			wantDamaged(t, path, seg)
		})
	}
}

// A log left by a crash of the version before segment headers (records
// without prev) is still replayed.
func TestAdvanceLogReplaysEarlierFormat(t *testing.T) {
	path := emptyStore(t)
	var b []byte
	for i, r := range []string{"/a", "/b"} {
		p := binary.BigEndian.AppendUint64(nil, uint64(i+1)) // lsn
		p = binary.BigEndian.AppendUint64(p, 7)              // token
		p = binary.BigEndian.AppendUint64(p, 1)              // at
		p = append(p, byte(len(r)))
		p = append(p, r...)
		p = append(p, 1, 'o')
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = binary.BigEndian.AppendUint32(b, crc32.Checksum(p, crcTable))
		b = append(b, p...)
	}
	b = append(b, make([]byte, 4096)...)
	os.WriteFile(path+".wal.1", b, 0o600)
	st := openStore(t, path)
	defer st.Close()
	if a, bb := highest(t, st, "/a"), highest(t, st, "/b"); a != 7 || bb != 7 {
		t.Fatalf("/a=%d /b=%d; want 7 and 7", a, bb)
	}
}

// A failed fdatasync makes the log fail for good: the advance fails, Ping
// fails (so /readyz does) and the state says so; a clean segment creation
// failure heals with the next attempt.
func TestAdvanceLogFailedSyncIsFatal(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "fencegate.db"))
	defer st.Close()
	advanceTo(t, st, "/a", 1)
	orig := fdatasync
	fdatasync = func(*os.File) error { return syscall.EIO }
	_, err := st.AdvanceFence(context.Background(), "/a", 2, "o")
	fdatasync = orig
	if err == nil {
		t.Fatal("advance acknowledged after a failed fdatasync")
	}
	if _, err := st.AdvanceFence(context.Background(), "/a", 3, "o"); err == nil {
		t.Fatal("advance acknowledged by a log whose fdatasync failed before")
	}
	if err := st.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("Ping after a failed fdatasync: %v; want an error that says to restart", err)
	}
	if s := st.Stats(); s.LogState != 2 || s.LogErrors != 1 {
		t.Fatalf("stats %+v; want LogState 2, one error", s)
	}
}
