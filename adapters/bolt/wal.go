package bolt

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// The fence-advance log (docs/storage.md, "The advance log"). A batch of
// advances is appended to a preallocated segment file and made durable with
// one fdatasync; the advances are then kept in memory (pending) until a
// checkpoint writes them into bbolt in large transactions, the last with
// the log position they cover (metaWALLSN). Open replays what the file does
// not cover yet. Every record is a raise-only max-merge, so replaying one
// twice changes nothing.

var metaWALLSN = []byte("wal_lsn")

const (
	// segmentSize is a log segment's preallocated size: written with zeros
	// and fsynced when created, so an append changes no file metadata and
	// its fdatasync writes the data alone.
	segmentSize = 8 << 20
	// checkpointChanges and checkpointEvery trigger a checkpoint: so many
	// pending resources, or that long since the first pending one.
	checkpointChanges = 8192
	checkpointEvery   = time.Second
	// recHeader is a record's length and CRC-32C (Castagnoli) of the payload.
	recHeader = 8
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// walRecord is one logged advance.
type walRecord struct {
	lsn      uint64
	token    int64
	at       int64 // Unix nanoseconds
	resource string
	owner    string
}

func (r walRecord) appendTo(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, recHeader)...)
	b = binary.BigEndian.AppendUint64(b, r.lsn)
	b = binary.BigEndian.AppendUint64(b, uint64(r.token))
	b = binary.BigEndian.AppendUint64(b, uint64(r.at))
	b = binary.AppendUvarint(b, uint64(len(r.resource)))
	b = append(b, r.resource...)
	b = binary.AppendUvarint(b, uint64(len(r.owner)))
	b = append(b, r.owner...)
	payload := b[start+recHeader:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(payload, crcTable))
	return b
}

var errTorn = errors.New("torn or corrupt log record")

// decodeRecord reads the record at the start of b. It returns the record's
// size, 0 at the end of the written part (a zero length), or errTorn.
func decodeRecord(b []byte) (walRecord, int, error) {
	var r walRecord
	if len(b) < recHeader {
		return r, 0, nil
	}
	n := int(binary.BigEndian.Uint32(b))
	if n == 0 {
		return r, 0, nil
	}
	if n > len(b)-recHeader || n < 24 {
		return r, 0, errTorn
	}
	p := b[recHeader : recHeader+n]
	if crc32.Checksum(p, crcTable) != binary.BigEndian.Uint32(b[4:]) {
		return r, 0, errTorn
	}
	r.lsn = binary.BigEndian.Uint64(p)
	r.token = int64(binary.BigEndian.Uint64(p[8:]))
	r.at = int64(binary.BigEndian.Uint64(p[16:]))
	p = p[24:]
	var ok bool
	if r.resource, p, ok = readString(p); !ok {
		return r, 0, errTorn
	}
	if r.owner, _, ok = readString(p); !ok {
		return r, 0, errTorn
	}
	return r, recHeader + n, nil
}

func readString(p []byte) (string, []byte, bool) {
	l, k := binary.Uvarint(p)
	if k <= 0 || l > uint64(len(p)-k) {
		return "", nil, false
	}
	return string(p[k : k+int(l)]), p[k+int(l):], true
}

// pendingEntry is an advance that is durable in the log and maybe not yet
// in bbolt: the highest logged token of a resource since the last
// checkpoint, and the position of its latest record.
type pendingEntry struct {
	highest int64
	owner   string
	at      time.Time
	lsn     uint64
}

// pending is the in-memory overlay of logged advances.
type pending struct {
	// mu is read-locked by reads and snapshots; only applying a batch and
	// forgetting checkpointed entries lock it.
	mu    sync.RWMutex
	m     map[string]pendingEntry
	since time.Time // when the first entry after a checkpoint came
}

func (p *pending) get(resource string) (pendingEntry, bool) {
	p.mu.RLock()
	e, ok := p.m[resource]
	p.mu.RUnlock()
	return e, ok
}

// merge applies e to r if bbolt (whose checkpoint is at ckpt, read in the
// same transaction as r) does not cover it yet and it is higher.
func (e pendingEntry) merge(r fenceRecord, ckpt uint64) fenceRecord {
	if e.lsn > ckpt && e.highest > r.Highest {
		r.Highest, r.Owner, r.UpdatedAt = e.highest, e.owner, e.at
	}
	return r
}

func checkpointed(tx *bbolt.Tx) uint64 {
	if v := tx.Bucket(bucketMeta).Get(metaWALLSN); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// segment is one log file.
type segment struct {
	f    *os.File
	path string
	seq  uint64
	off  int64  // end of the written records
	size int64  // preallocated size
	last uint64 // lsn of its last record
}

// advanceLog is the log's writer: one goroutine appends and fdatasyncs
// every batch of advances queued while the previous batch was syncing (the
// group commit of commit.go, with one fdatasync per batch).
type advanceLog struct {
	s    *Store
	base string // segment files are base.wal.<seq>

	mu     sync.Mutex
	cond   sync.Cond
	queue  []*advance
	closed bool
	done   chan struct{}

	// appendMu is held while a batch is appended, synced and applied to
	// pending, and by checkpoints that must see no batch half applied.
	appendMu sync.Mutex
	seg      *segment   // being appended to; nil until the first append
	full     []*segment // older segments, not yet covered by a checkpoint
	nextSeq  uint64
	nextLSN  uint64
	err      error // sticky: after a failed write or sync the log is unusable
	// Reused by every batch (under appendMu): the encoded records, the
	// records logged, and the current and pending records of the batch's
	// resources.
	buf       []byte
	logged    []walRecord
	cur       map[string]fenceRecord
	inPending map[string]pendingEntry

	ckptMu  sync.Mutex // one checkpoint at a time
	kick    chan struct{}
	stopped chan struct{}

	syncs, batches, changes, checkpoints atomic.Uint64
}

// advance is one caller's queued advance.
type advance struct {
	resource string
	token    int64
	owner    string
	result   fenceRecord
	err      error // this advance's own failure (a corrupt record)
	done     chan error
}

func segmentPaths(base string) ([]string, []uint64, error) {
	dir, prefix := filepath.Dir(base), filepath.Base(base)+".wal."
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	type seg struct {
		path string
		seq  uint64
	}
	var segs []seg
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		if seq, err := strconv.ParseUint(rest, 10, 64); err == nil {
			segs = append(segs, seg{filepath.Join(dir, e.Name()), seq})
		}
	}
	sort.Slice(segs, func(a, b int) bool { return segs[a].seq < segs[b].seq })
	paths, seqs := make([]string, len(segs)), make([]uint64, len(segs))
	for i, sg := range segs {
		paths[i], seqs[i] = sg.path, sg.seq
	}
	return paths, seqs, nil
}

// replay applies the log's records that bbolt does not cover into bbolt,
// in one transaction that also records the last position, and removes the
// segment files. A torn record ends the last segment (its batch was never
// acknowledged: its fdatasync had not returned); one in an older segment,
// written before the last segment was created and synced, is corruption.
func replay(db *bbolt.DB, known *keyFilter, base string) (nextSeq, nextLSN uint64, err error) {
	paths, seqs, err := segmentPaths(base)
	if err != nil {
		return 0, 0, err
	}
	var recs []walRecord
	var last uint64
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return 0, 0, err
		}
		for off := 0; ; {
			r, n, err := decodeRecord(data[off:])
			if err != nil && i < len(paths)-1 {
				return 0, 0, fmt.Errorf("log segment %s at %d: %w", p, off, err)
			}
			if n == 0 || err != nil || r.lsn <= last {
				break
			}
			last = r.lsn
			recs = append(recs, r)
			off += n
		}
		nextSeq = seqs[i] + 1
	}
	var ckpt uint64
	err = db.Update(func(tx *bbolt.Tx) error {
		ckpt = checkpointed(tx)
		for _, rec := range recs {
			if rec.lsn <= ckpt {
				continue
			}
			r, err := getFence(tx, rec.resource)
			if err != nil {
				return err
			}
			e := pendingEntry{highest: rec.token, owner: rec.owner, at: time.Unix(0, rec.at).UTC(), lsn: rec.lsn}
			if r = e.merge(r, ckpt); r.Highest == rec.token {
				if err := putFence(tx, known, rec.resource, r); err != nil {
					return err
				}
			}
		}
		if last > ckpt {
			ckpt = last
			return tx.Bucket(bucketMeta).Put(metaWALLSN, binary.BigEndian.AppendUint64(nil, last))
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("replay log: %w", err)
	}
	for _, p := range paths {
		if err := os.Remove(p); err != nil {
			return 0, 0, err
		}
	}
	return max(nextSeq, 1), ckpt + 1, nil
}

func newAdvanceLog(s *Store, nextSeq, nextLSN uint64) *advanceLog {
	w := &advanceLog{s: s, base: s.path, done: make(chan struct{}), nextSeq: nextSeq, nextLSN: nextLSN,
		kick: make(chan struct{}, 1), stopped: make(chan struct{}),
		cur: make(map[string]fenceRecord), inPending: make(map[string]pendingEntry)}
	w.cond.L = &w.mu
	go w.run()
	go w.checkpointer()
	return w
}

// advances recycles advances with their channels: one whose answer was
// received is put back (release); one whose caller stopped waiting is
// left to the collector, since the log still answers it.
var advances = sync.Pool{New: func() any { return &advance{done: make(chan error, 1)} }}

// submit queues an advance.
func (w *advanceLog) submit(resource string, token int64, owner string) *advance {
	a := advances.Get().(*advance)
	a.resource, a.token, a.owner = resource, token, owner
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		a.done <- ErrClosed
		return a
	}
	w.queue = append(w.queue, a)
	w.cond.Signal()
	return a
}

// release puts a, whose answer was received, back for reuse.
func (a *advance) release() {
	*a = advance{done: a.done}
	advances.Put(a)
}

func (w *advanceLog) run() {
	defer close(w.done)
	var batch []*advance
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.closed {
			w.cond.Wait()
		}
		n := min(len(w.queue), maxChanges)
		batch = append(batch[:0], w.queue[:n]...)
		w.queue = append(w.queue[:0], w.queue[n:]...)
		w.mu.Unlock()
		if n == 0 {
			return
		}
		err := w.write(batch)
		for i, a := range batch {
			a.done <- cmp.Or(err, a.err) // a may be reused from here on
			batch[i] = nil
		}
	}
}

// write logs the advances of batch that raise a fence, fdatasyncs once,
// applies them to pending and sets every advance's result.
func (w *advanceLog) write(batch []*advance) error {
	w.appendMu.Lock()
	defer w.appendMu.Unlock()
	if w.err != nil {
		return w.err
	}
	s := w.s
	// The current records: pending first, then bbolt (a checkpoint removes
	// an entry from pending only after its commit); a resource bbolt has no
	// record of (filter.go) needs no bbolt read.
	cur, inPending := w.cur, w.inPending
	clear(cur)
	clear(inPending)
	s.pending.mu.RLock()
	for _, a := range batch {
		if e, ok := s.pending.m[a.resource]; ok {
			inPending[a.resource] = e
		}
	}
	s.pending.mu.RUnlock()
	read := false
	for _, a := range batch {
		if s.known.mayHave(a.resource) {
			read = true
		} else {
			cur[a.resource] = inPending[a.resource].merge(fenceRecord{}, 0)
		}
	}
	if read {
		if err := s.db.View(w.readCurrent(batch)); err != nil {
			return err
		}
	}
	now := time.Now().UTC()
	buf := w.buf[:0]
	logged := w.logged[:0]
	for _, a := range batch {
		r, ok := cur[a.resource]
		if !ok {
			if a.err == nil {
				a.err = fmt.Errorf("corrupt fence record for %q", a.resource)
			}
			continue
		}
		if a.token > r.Highest {
			r.Highest, r.Owner, r.UpdatedAt = a.token, a.owner, now
			cur[a.resource] = r
			rec := walRecord{lsn: w.nextLSN + uint64(len(logged)), token: a.token, at: now.UnixNano(), resource: a.resource, owner: a.owner}
			buf = rec.appendTo(buf)
			logged = append(logged, rec)
		}
		a.result = r
	}
	w.buf, w.logged = buf, logged
	if len(logged) == 0 {
		return nil
	}
	if err := w.append(buf); err != nil {
		w.err = fmt.Errorf("advance log: %w", err)
		return w.err
	}
	w.nextLSN += uint64(len(logged))
	w.seg.last = logged[len(logged)-1].lsn
	w.syncs.Add(1)
	w.batches.Add(1)
	w.changes.Add(uint64(len(logged)))
	s.pending.mu.Lock()
	if len(s.pending.m) == 0 {
		s.pending.since = now
	}
	for _, rec := range logged {
		e := s.pending.m[rec.resource]
		if rec.token > e.highest {
			e.highest, e.owner, e.at = rec.token, rec.owner, now
		}
		e.lsn = rec.lsn
		s.pending.m[rec.resource] = e
	}
	kick := len(s.pending.m) >= checkpointChanges
	s.pending.mu.Unlock()
	if kick {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// readCurrent reads into w.cur the bbolt records of the advances of batch
// that are not there yet, merged with their pending entries.
func (w *advanceLog) readCurrent(batch []*advance) func(tx *bbolt.Tx) error {
	return func(tx *bbolt.Tx) error {
		ckpt := checkpointed(tx)
		for _, a := range batch {
			if _, ok := w.cur[a.resource]; ok {
				continue
			}
			r, err := getFence(tx, a.resource)
			if err != nil {
				a.err = err // the others go on without it
				continue
			}
			if e, ok := w.inPending[a.resource]; ok {
				r = e.merge(r, ckpt)
			}
			w.cur[a.resource] = r
		}
		return nil
	}
}

// append writes b at the end of the current segment (a new one if it does
// not fit) and fdatasyncs it.
func (w *advanceLog) append(b []byte) error {
	if w.seg == nil || w.seg.off+int64(len(b)) > w.seg.size {
		seg, err := w.newSegment(max(segmentSize, int64(len(b))+recHeader))
		if err != nil {
			return err
		}
		if w.seg != nil {
			w.full = append(w.full, w.seg)
		}
		w.seg = seg
	}
	if _, err := w.seg.f.WriteAt(b, w.seg.off); err != nil {
		return err
	}
	if err := fdatasync(w.seg.f); err != nil {
		return err
	}
	w.seg.off += int64(len(b))
	return nil
}

// newSegment creates a segment file of size zero bytes, synced, with its
// directory entry synced.
func (w *advanceLog) newSegment(size int64) (*segment, error) {
	seq := w.nextSeq
	w.nextSeq++
	p := fmt.Sprintf("%s.wal.%d", w.base, seq)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.Write(zeros[:min(int64(len(zeros)), size-off)]); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		f.Close()
		return nil, err
	}
	w.syncs.Add(2)
	return &segment{f: f, path: p, seq: seq, size: size}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checkpointer checkpoints when pending is large or old.
func (w *advanceLog) checkpointer() {
	defer close(w.stopped)
	t := time.NewTicker(checkpointEvery / 4)
	defer t.Stop()
	for {
		select {
		case <-w.kick:
		case <-t.C:
			w.s.pending.mu.RLock()
			due := len(w.s.pending.m) > 0 && time.Since(w.s.pending.since) >= checkpointEvery
			w.s.pending.mu.RUnlock()
			if !due {
				continue
			}
		case <-w.done:
			return
		}
		w.checkpoint(nil) // an error leaves the records in the log: the next one retries
	}
}

// checkpoint writes every pending advance into bbolt, with the log
// position it covers, then forgets them and removes the segments it
// covers. With fn set (reset and import, which must see and replace the
// latest records: a reset's lower fence must not be raised again by an
// older advance), the bulk is checkpointed first while advances go on,
// then what was logged meanwhile is checkpointed in fn's transaction while
// no batch is appended: every earlier advance is in bbolt and covered by
// the position before fn changes anything.
func (w *advanceLog) checkpoint(fn func(tx *bbolt.Tx) error) error {
	w.ckptMu.Lock()
	defer w.ckptMu.Unlock()
	if fn != nil {
		if err := w.checkpointOnce(nil); err != nil {
			return err
		}
	}
	return w.checkpointOnce(fn)
}

// checkpointChunk bounds the records of one checkpoint transaction: on a
// large store each lands in a leaf page of its own, and a long transaction
// would hold bbolt's writer lock (leases, ETag marks) for its whole write.
const checkpointChunk = 1024

func (w *advanceLog) checkpointOnce(fn func(tx *bbolt.Tx) error) error {
	s := w.s
	w.appendMu.Lock()
	held := true
	defer func() {
		if held {
			w.appendMu.Unlock()
		}
	}()
	upto := w.nextLSN - 1
	s.pending.mu.RLock()
	snap := make(map[string]pendingEntry, len(s.pending.m))
	keys := make([]string, 0, len(s.pending.m))
	for k, e := range s.pending.m {
		snap[k] = e
		keys = append(keys, k)
	}
	s.pending.mu.RUnlock()
	if fn == nil {
		if len(snap) == 0 {
			return nil
		}
		w.appendMu.Unlock() // advances go on while bbolt commits
		held = false
	}
	sort.Strings(keys) // in key order: fewer pages touched per leaf
	all := keys
	// Chunks before the last only write records (a replay would apply them
	// again: harmless); the last raises the position and runs fn.
	for {
		chunk := keys[:min(len(keys), checkpointChunk)]
		keys = keys[len(chunk):]
		last := len(keys) == 0
		err := s.db.Update(func(tx *bbolt.Tx) error {
			ckpt := checkpointed(tx)
			for _, k := range chunk {
				var r fenceRecord
				if s.known.mayHave(k) { // else bbolt has no record of k (filter.go)
					var err error
					if r, err = getFence(tx, k); err != nil {
						return err
					}
				}
				if m := snap[k].merge(r, ckpt); m.Highest != r.Highest {
					if err := putFence(tx, s.known, k, m); err != nil {
						return err
					}
				}
			}
			if !last {
				return nil
			}
			if upto > ckpt {
				if err := tx.Bucket(bucketMeta).Put(metaWALLSN, binary.BigEndian.AppendUint64(nil, upto)); err != nil {
					return err
				}
			}
			if fn != nil {
				return fn(tx)
			}
			return nil
		})
		if err != nil {
			return err
		}
		w.syncs.Add(2)
		if last {
			break
		}
	}
	w.checkpoints.Add(1)
	// Forget what bbolt now covers, a chunk at a time so that reads wait
	// for one chunk at most. Only snapshot entries can be at or below upto
	// (it was read under appendMu); those logged again since are above it.
	for len(all) > 0 {
		chunk := all[:min(len(all), checkpointChunk)]
		all = all[len(chunk):]
		s.pending.mu.Lock()
		for _, k := range chunk {
			if e, ok := s.pending.m[k]; ok && e.lsn <= upto {
				delete(s.pending.m, k)
			}
		}
		s.pending.mu.Unlock()
	}
	s.pending.mu.Lock()
	s.pending.since = time.Now()
	s.pending.mu.Unlock()
	if !held {
		w.appendMu.Lock()
		held = true
	}
	keep := w.full[:0]
	for _, seg := range w.full {
		if seg.last <= upto {
			seg.f.Close()
			os.Remove(seg.path)
			continue
		}
		keep = append(keep, seg)
	}
	w.full = keep
	return nil
}

// close drains the queue, checkpoints everything and removes the log.
func (w *advanceLog) close() error {
	w.mu.Lock()
	w.closed = true
	w.cond.Signal()
	w.mu.Unlock()
	<-w.done
	<-w.stopped
	err := w.checkpoint(nil)
	w.appendMu.Lock()
	defer w.appendMu.Unlock()
	segs := w.full
	if w.seg != nil {
		segs = append(segs, w.seg)
	}
	for _, seg := range segs {
		seg.f.Close()
		if err == nil && w.err == nil {
			os.Remove(seg.path)
		}
	}
	w.full, w.seg = nil, nil
	return err
}

func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
