package bolt

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	bbolt "go.etcd.io/bbolt"
)

func openStore(t *testing.T, path string) *Store {
	t.Helper()
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func highest(t *testing.T, st *Store, resource string) int64 {
	t.Helper()
	f, err := st.LoadFence(context.Background(), resource)
	if err != nil {
		t.Fatal(err)
	}
	return f.Highest
}

func advanceTo(t *testing.T, st *Store, resource string, token int64) {
	t.Helper()
	if _, err := st.AdvanceFence(context.Background(), resource, token, "o"); err != nil {
		t.Fatal(err)
	}
}

// crashCopy copies the store's files as a crash at this moment leaves them
// (everything the store synced is in them) into a new directory, and
// returns the copy's store path. The original stays open.
func crashCopy(t *testing.T, st *Store) string {
	t.Helper()
	dir := t.TempDir()
	paths, _, err := segmentPaths(st.path)
	if err != nil {
		t.Fatal(err)
	}
	st.log.appendMu.Lock() // no batch half written while we copy
	defer st.log.appendMu.Unlock()
	for _, p := range append(paths, st.path) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, filepath.Base(st.path))
}

func segments(t *testing.T, path string) []string {
	t.Helper()
	p, _, err := segmentPaths(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// An acknowledged advance is in the log before any checkpoint, a crash
// then replays it, and the replay leaves nothing behind. A clean Close
// checkpoints everything and removes the log.
func TestAdvanceLogReplayAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	st := openStore(t, path)
	defer st.Close()
	advanceTo(t, st, "a", 5)
	advanceTo(t, st, "a", 7)
	advanceTo(t, st, "a", 6) // lower: no effect
	advanceTo(t, st, "b", 3)
	if n := len(segments(t, path)); n != 1 {
		t.Fatalf("%d log segments; want 1", n)
	}
	var inBolt int64
	st.db.View(func(tx *bbolt.Tx) error {
		r, _ := getFence(tx, "a")
		inBolt = r.Highest
		return nil
	})
	if inBolt != 0 {
		t.Fatalf("a is %d in bbolt before any checkpoint; the test wants it in the log only", inBolt)
	}
	copyPath := crashCopy(t, st)
	again := openStore(t, copyPath)
	if a, b := highest(t, again, "a"), highest(t, again, "b"); a != 7 || b != 3 {
		t.Fatalf("after replay a=%d b=%d; want 7 and 3", a, b)
	}
	if n := len(segments(t, copyPath)); n != 0 {
		t.Fatalf("%d log segments after the replay; want 0", n)
	}
	again.Close()

	st.Close()
	if n := len(segments(t, path)); n != 0 {
		t.Fatalf("%d log segments after Close; want 0", n)
	}
	st = openStore(t, path)
	if a := highest(t, st, "a"); a != 7 {
		t.Fatalf("after Close and Open a=%d; want 7", a)
	}
}

// writeSegment writes recs as log segment seq of path, followed by tail,
// as the log writes one: a header, the records, zeros to its size.
func writeSegment(t *testing.T, path string, seq uint64, recs []walRecord, tail []byte) {
	t.Helper()
	b := segmentHeader(seq, 64<<10)
	for _, r := range recs {
		b = r.appendTo(b)
	}
	b = append(b, tail...)
	b = append(b, make([]byte, 64<<10-len(b))...)
	if err := os.WriteFile(fmt.Sprintf("%s.wal.%d", path, seq), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func emptyStore(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	openStore(t, path).Close()
	return path
}

// A torn last record (its batch was never acknowledged) is dropped, the
// records before it are replayed; a corrupt record in an older segment
// refuses the open.
func TestAdvanceLogTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail func(full []byte) []byte
	}{
		{"half a record", func(full []byte) []byte { return full[:len(full)/2] }},
		{"bad checksum", func(full []byte) []byte { full[len(full)-1] ^= 0xff; return full }},
		{"length past the end", func(full []byte) []byte {
			binary.BigEndian.PutUint32(full, 1<<30)
			return full
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := emptyStore(t)
			torn := walRecord{lsn: 3, token: 99, at: 1, resource: "a", owner: "o"}.appendTo(nil)
			writeSegment(t, path, 1, []walRecord{
				{lsn: 1, token: 5, at: 1, resource: "a", owner: "o"},
				{lsn: 2, token: 4, at: 1, resource: "b", owner: "o"},
			}, tc.tail(torn))
			st := openStore(t, path)
			defer st.Close()
			if a, b := highest(t, st, "a"), highest(t, st, "b"); a != 5 || b != 4 {
				t.Fatalf("a=%d b=%d; want 5 and 4 (the torn record dropped)", a, b)
			}
			// New advances continue after the replayed ones (the torn
			// record's position is not reused); an idle mark may follow.
			advanceTo(t, st, "c", 1)
			st.log.appendMu.Lock()
			next := st.log.nextLSN
			st.log.appendMu.Unlock()
			if next < 4 {
				t.Fatalf("next lsn %d; want 4 or more", next)
			}
		})
	}
	t.Run("corrupt older segment", func(t *testing.T) {
		path := emptyStore(t)
		bad := walRecord{lsn: 1, token: 5, at: 1, resource: "a", owner: "o"}.appendTo(nil)
		bad[len(bad)-1] ^= 0xff
		writeSegment(t, path, 1, nil, bad)
		// Written after lsn 1 was acknowledged.
		writeSegment(t, path, 2, []walRecord{{lsn: 2, prev: 1, token: 5, at: 1, resource: "b", owner: "o"}}, nil)
		if st, err := Open(path, Options{}); err == nil {
			st.Close()
			t.Fatal("Open accepted a corrupt record in an older log segment")
		}
	})
}

// Replaying a log twice (a crash after the replay's commit, before its
// files were removed) changes nothing, even after a reset lowered a fence
// the log raised: the records the checkpoint position covers are skipped.
func TestAdvanceLogReplayIdempotent(t *testing.T) {
	path := emptyStore(t)
	recs := []walRecord{
		{lsn: 1, token: 50, at: 1, resource: "a", owner: "o"},
		{lsn: 2, token: 7, at: 1, resource: "b", owner: "o"},
		{lsn: 3, token: 8, at: 1, resource: "b", owner: "p"},
	}
	writeSegment(t, path, 1, recs, nil)
	saved, _ := os.ReadFile(path + ".wal.1")
	st := openStore(t, path)
	if _, err := st.ResetFence(context.Background(), "a", 10, "admin"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for range 2 {
		if err := os.WriteFile(path+".wal.1", saved, 0o600); err != nil {
			t.Fatal(err)
		}
		st = openStore(t, path)
		f, _ := st.LoadFence(context.Background(), "b")
		if a := highest(t, st, "a"); a != 10 || f.Highest != 8 || f.Owner != "p" {
			t.Fatalf("after replaying again a=%d b=%d/%s; want 10 (the reset) and 8/p", a, f.Highest, f.Owner)
		}
		st.Close()
	}
}

// A reset after an advance that is still only in the log is not undone:
// not by reads, not by a later checkpoint, not by a replay after a crash.
func TestResetAfterPendingAdvance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	st := openStore(t, path)
	defer st.Close()
	ctx := context.Background()
	advanceTo(t, st, "x", 50)
	if e, ok := st.pending.get("x"); !ok || e.highest != 50 {
		t.Fatalf("x not pending (%v %v); the test wants it in the log only", e, ok)
	}
	if _, err := st.ResetFence(ctx, "x", 10, "admin"); err != nil {
		t.Fatal(err)
	}
	if h := highest(t, st, "x"); h != 10 {
		t.Fatalf("x=%d after the reset; want 10", h)
	}
	// Between the reset's commit and its clearing of pending, the old entry
	// is still there: the checkpoint position it is below hides it.
	stale := pendingEntry{highest: 50, owner: "o", lsn: 1}
	st.pending.mu.Lock()
	st.pending.m["x"] = stale
	st.pending.mu.Unlock()
	if h := highest(t, st, "x"); h != 10 {
		t.Fatalf("x=%d with the reset's stale pending entry; want 10", h)
	}
	if err := st.RecordETag(ctx, "x", 10, `"v"`); err != nil {
		t.Fatal(err)
	}
	if err := st.flushETags(); err != nil { // a committer write merges pending
		t.Fatal(err)
	}
	st.pending.mu.Lock()
	delete(st.pending.m, "x")
	st.pending.mu.Unlock()
	if h := highest(t, st, "x"); h != 10 {
		t.Fatalf("x=%d after an ETag write with the stale entry; want 10", h)
	}
	crashed := crashCopy(t, st)
	advanceTo(t, st, "y", 1)  // a later batch
	advanceTo(t, st, "x", 10) // equal to the reset: no effect
	if err := st.log.checkpoint(nil); err != nil {
		t.Fatal(err)
	}
	if h := highest(t, st, "x"); h != 10 {
		t.Fatalf("x=%d after a checkpoint; want 10", h)
	}
	advanceTo(t, st, "x", 12) // above the reset: raises again
	crashed2 := crashCopy(t, st)
	for _, tc := range []struct {
		path string
		want int64
	}{{crashed, 10}, {crashed2, 12}} {
		again := openStore(t, tc.path)
		if h := highest(t, again, "x"); h != tc.want {
			t.Errorf("x=%d after a crash and replay; want %d", h, tc.want)
		}
		again.Close()
	}
}

// ETag marks (committer) and imports see advances that are only logged.
func TestPendingAdvanceSeenByETagAndImport(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "fencegate.db"))
	defer st.Close()
	ctx := context.Background()
	advanceTo(t, st, "e", 3)
	if err := st.RecordETag(ctx, "e", 3, `"v1"`); err != nil {
		t.Fatalf("RecordETag on a logged advance: %v", err)
	}
	if f, _ := st.LoadFence(ctx, "e"); f.Highest != 3 || f.ETag != `"v1"` {
		t.Fatalf("e = %d %q; want 3 \"v1\"", f.Highest, f.ETag)
	}
}

// The child of TestAdvanceLogKill9: advances from many goroutines and
// prints every acknowledged one, until it is killed.
func TestMain(m *testing.M) {
	if path := os.Getenv("FENCEGATE_WAL_CHILD"); path != "" {
		walChild(path)
		return
	}
	os.Exit(m.Run())
}

func walChild(path string) {
	st, err := Open(path, Options{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(1); ; i++ {
				// A new resource every write, and one raised over and over.
				res, tok := fmt.Sprintf("/r/%d/%d", g, i), int64(7)
				if i%4 == 0 {
					res, tok = fmt.Sprintf("/hot/%d", g), i
				}
				if _, err := st.AdvanceFence(context.Background(), res, tok, "child"); err != nil {
					fmt.Println("advance:", err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Fprintf(out, "%s %d\n", res, tok)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// kill -9 in the middle of a load of advances: every advance the child
// printed (it prints after the acknowledgement) is in the store after
// reopening, across checkpoints and log segments.
func TestAdvanceLogKill9(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	for round := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "FENCEGATE_WAL_CHILD="+path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[string]int64{}
		sc := bufio.NewScanner(stdout)
		n := 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			tok, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if len(f) != 2 || err != nil {
				t.Fatalf("child: %s", sc.Text())
			}
			acked[f[0]] = max(acked[f[0]], tok)
			if n++; n == 20000+round*5000 {
				cmd.Process.Kill() // SIGKILL
			}
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		if n < 20000 {
			t.Fatalf("the child acknowledged %d advances and stopped", n)
		}
		// Both paths are exercised: records in the log, and checkpoints.
		if len(segments(t, path)) == 0 {
			t.Fatal("no log segment left by the killed child")
		}
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		var ckpt uint64
		db.View(func(tx *bbolt.Tx) error { ckpt = checkpointed(tx); return nil })
		db.Close()
		if ckpt == 0 {
			t.Fatal("the child made no checkpoint")
		}
		st := openStore(t, path)
		var missing []string
		for res, tok := range acked {
			if h := highest(t, st, res); h < tok {
				missing = append(missing, fmt.Sprintf("%s: %d < %d", res, h, tok))
			}
		}
		st.Close()
		if len(missing) > 0 {
			t.Fatalf("round %d: %d of %d acknowledged advances lost after kill -9, e.g. %v", round, len(missing), len(acked), missing[:min(5, len(missing))])
		}
		t.Logf("round %d: %d acknowledged advances (%d resources) survived kill -9 (checkpointed up to %d)", round, n, len(acked), ckpt)
	}
}

// An advance whose stored record is corrupt fails alone; the others of its
// batch are logged.
func TestAdvanceLogIsolatesCorruptRecord(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "fencegate.db"))
	defer st.Close()
	st.known.add("bad") // written around putFence
	st.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketFences).Put([]byte("bad"), []byte("{")) })
	// Both queued at once, so that they are one batch.
	bad := &advance{resource: "bad", token: 5, owner: "o", done: make(chan error, 1)}
	good := &advance{resource: "good", token: 5, owner: "o", done: make(chan error, 1)}
	st.log.mu.Lock()
	st.log.queue = append(st.log.queue, bad, good)
	st.log.cond.Signal()
	st.log.mu.Unlock()
	if err := <-bad.done; err == nil {
		t.Fatal("advance over a corrupt record succeeded")
	}
	if err := <-good.done; err != nil || good.result.Highest != 5 {
		t.Fatalf("the other advance of the batch: %v %d", err, good.result.Highest)
	}
}

// A resource name bbolt would refuse at the checkpoint is refused before it
// is logged: one such advance acknowledged would stop every checkpoint and
// the replay at the next Open (everyone locked out).
func TestAdvanceRefusesNameBboltCannotStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	st := openStore(t, path)
	for _, res := range []string{"", strings.Repeat("x", bbolt.MaxKeySize+1)} {
		if _, err := st.AdvanceFence(context.Background(), res, 5, "o"); err == nil {
			t.Errorf("advance of a %d-byte resource name accepted", len(res))
		}
	}
	longest := strings.Repeat("y", bbolt.MaxKeySize)
	advanceTo(t, st, longest, 5)
	if err := st.log.checkpoint(nil); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	st.Close()
	st = openStore(t, path)
	defer st.Close()
	if h := highest(t, st, longest); h != 5 {
		t.Fatalf("longest name: %d; want 5", h)
	}
}

// Advances are recycled once answered: under concurrent callers, some of
// which stop waiting, every answer is the caller's own (its resource and
// its token), and every acknowledged advance is durable after a reopen.
func TestAdvanceRecycledAnswersItsOwnCaller(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	st := openStore(t, path)
	var (
		mu    sync.Mutex
		acked = map[string]int64{}
		wg    sync.WaitGroup
	)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				res, token := fmt.Sprintf("/r/%d/%d", g, i), int64(1+i%7)
				ctx, cancel := context.WithCancel(context.Background())
				if i%5 == 0 {
					go cancel() // this caller may stop waiting
				}
				f, err := st.AdvanceFence(ctx, res, token, "o")
				cancel()
				if err != nil {
					continue
				}
				if f.Resource != res || f.Highest != token {
					t.Errorf("advance of %s to %d answered %s at %d", res, token, f.Resource, f.Highest)
					return
				}
				mu.Lock()
				acked[res] = token
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	st.Close()
	st = openStore(t, path)
	defer st.Close()
	for res, token := range acked {
		if got := highest(t, st, res); got != token {
			t.Fatalf("%s: highest %d after reopen; want %d", res, got, token)
		}
	}
}
