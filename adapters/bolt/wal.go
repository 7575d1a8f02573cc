package bolt

import (
	"cmp"
	"context"
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
//
// A crash can tear only the batch being written: the writer appends a
// batch only after the previous one's fdatasync returned. Everything
// before it was acknowledged and must be readable, so that a damaged
// record is never taken for the end of the log (which would forget
// acknowledged advances and let older tokens through). Three things make
// acknowledged records detectably present:
//   - every record carries prev, the last position acknowledged when its
//     batch was written: a record whose prev is above what the replay has
//     read proves that records before it are missing;
//   - when the log goes idle after a batch, a mark record (no resource) is
//     written and synced, so that the last batch is vouched for as well;
//   - each segment starts with a checksummed header holding its size, and
//     bbolt records which segments exist (metaWALSeg, metaWALKeep), so a
//     truncated or deleted segment is caught too.

var (
	metaWALLSN = []byte("wal_lsn")
	// metaWALSeg is the highest segment number created (recorded in bbolt
	// after the segment file and its header are synced, before its first
	// append); metaWALKeep the lowest that a replay still needs. Every
	// segment in between must exist.
	metaWALSeg  = []byte("wal_seg")
	metaWALKeep = []byte("wal_keep")
)

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
	// segHeaderSize is a segment header's size: magic, sequence number,
	// preallocated size, CRC-32C of those, padding.
	segHeaderSize = 32
	// markDelay is how long the log waits after a batch for another before
	// it writes a mark vouching for it: a damaged record of the last batch
	// is detected once its mark is synced.
	markDelay = 2 * time.Millisecond
	// maxRecord bounds a record's payload (a resource name of at most
	// bbolt.MaxKeySize bytes and its owner) when the replay looks past a
	// damaged record for later ones.
	maxRecord = 1 << 20
)

// segMagic starts a segment written with a header and records that carry
// prev. A segment without it was written by an earlier version: its
// records start at offset 0 and have no prev.
var segMagic = []byte("FGWAL\x00\x02\x00")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// walRecord is one logged advance, or a mark (resource ""). A mark's token
// is 0, or a serving record (serving.go).
type walRecord struct {
	lsn      uint64
	prev     uint64 // the last position acknowledged when its batch was written
	token    int64
	at       int64 // Unix nanoseconds
	resource string
	owner    string
}

func (r walRecord) mark() bool { return r.resource == "" }

func (r walRecord) appendTo(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, recHeader)...)
	b = binary.BigEndian.AppendUint64(b, r.lsn)
	b = binary.BigEndian.AppendUint64(b, r.prev)
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

// recordFormat is a segment's record layout: the current one, or an
// earlier version's (no prev), read so that a log left by a crash of
// that version is still replayed.
type recordFormat int

const (
	formatCurrent recordFormat = iota
	formatNoPrev
)

func (f recordFormat) fixed() int {
	if f == formatNoPrev {
		return 24
	}
	return 32
}

// decodeRecord reads the record at the start of b. It returns the record's
// size, 0 at the end of the written part (a zero length), or errTorn.
func decodeRecord(b []byte, f recordFormat) (walRecord, int, error) {
	var r walRecord
	if len(b) < recHeader {
		return r, 0, nil
	}
	n := int(binary.BigEndian.Uint32(b))
	if n == 0 {
		return r, 0, nil
	}
	if n > len(b)-recHeader || n < f.fixed()+2 {
		return r, 0, errTorn
	}
	p := b[recHeader : recHeader+n]
	if crc32.Checksum(p, crcTable) != binary.BigEndian.Uint32(b[4:]) {
		return r, 0, errTorn
	}
	r.lsn = binary.BigEndian.Uint64(p)
	p = p[8:]
	if f == formatCurrent {
		r.prev = binary.BigEndian.Uint64(p)
		p = p[8:]
	}
	r.token = int64(binary.BigEndian.Uint64(p))
	r.at = int64(binary.BigEndian.Uint64(p[8:]))
	p = p[16:]
	var ok bool
	if r.resource, p, ok = readString(p); !ok {
		return r, 0, errTorn
	}
	if r.owner, p, ok = readString(p); !ok || len(p) != 0 {
		return r, 0, errTorn
	}
	if f == formatNoPrev && r.resource == "" {
		return r, 0, errTorn // that version wrote no marks
	}
	return r, recHeader + n, nil
}

// segmentHeader is the header of segment seq, preallocated to size bytes.
func segmentHeader(seq uint64, size int64) []byte {
	b := append([]byte(nil), segMagic...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return append(b, 0, 0, 0, 0)
}

// parseSegmentHeader reads a segment's header: its format, where its
// records start and the size it was preallocated to (0 for the earlier
// format, which recorded none). A file that starts with the magic but
// whose header fails its checksum is damaged.
func parseSegmentHeader(data []byte) (f recordFormat, start int, size int64, err error) {
	if len(data) < len(segMagic) || string(data[:len(segMagic)]) != string(segMagic) {
		return formatNoPrev, 0, 0, nil
	}
	if len(data) < segHeaderSize || crc32.Checksum(data[:24], crcTable) != binary.BigEndian.Uint32(data[24:]) {
		return 0, 0, 0, errors.New("segment header fails its checksum")
	}
	return formatCurrent, segHeaderSize, int64(binary.BigEndian.Uint64(data[16:])), nil
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
	acked    uint64 // the last position of the last batch synced
	// err is sticky: after a failed fdatasync the log is unusable (what
	// the kernel dropped from its cache is unknown, and a later sync may
	// report success without it), the store fails its Ping and the
	// process must restart. failing is an error that put nothing
	// acknowledged at risk (no space to create a segment, a failed
	// write): each batch tries again and the first to succeed clears it.
	err     error
	failing atomic.Pointer[error]
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

	markTimer *time.Timer // owned by run

	// serving is the last serving mark appended (0: none since Open), at
	// position servingLSN; servingSaved is the position of the one the
	// last checkpoint wrote into bbolt (under appendMu).
	serving, servingLSN, servingSaved uint64

	syncs, batches, changes, checkpoints atomic.Uint64
	writeErrors, checkpointErrors        atomic.Uint64
}

// advance is one caller's queued advance.
type advance struct {
	resource string
	token    int64
	owner    string
	result   fenceRecord
	err      error  // this advance's own failure (a corrupt record)
	mark     bool   // a mark vouching for the batches before it
	serving  uint64 // a mark's token: a serving record (serving.go), or 0
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

// ErrLogDamaged reports an advance log that lost acknowledged records: a
// damaged record followed by records that vouch for it, or a truncated or
// missing segment. The store refuses to open on it (LogDamagedError says
// where, and docs/recovery.md how to recover).
var ErrLogDamaged = errors.New("advance log damaged")

// LogDamagedError is ErrLogDamaged with the place and what is missing.
type LogDamagedError struct {
	Segment string // the segment file
	Offset  int64  // where readable records end (-1: the whole file)
	Reason  string
}

func (e *LogDamagedError) Error() string {
	where := e.Segment
	if e.Offset >= 0 {
		where = fmt.Sprintf("%s at byte %d", e.Segment, e.Offset)
	}
	return fmt.Sprintf("%v: %s: %s. Refusing to open: replaying around it would forget acknowledged fence advances "+
		"and let older tokens through. Restore the store file with its log segments from a backup, or run "+
		"'fencegate fence salvage-log' and then raise the fences from the newest export ('fencegate fence import') "+
		"or the objects' stamps ('fencegate fence rebuild'); see docs/recovery.md, \"A damaged advance log\"",
		ErrLogDamaged, where, e.Reason)
}

func (e *LogDamagedError) Unwrap() error { return ErrLogDamaged }

// SalvageReport says what a salvaging Open (Options.SalvageLog) found.
type SalvageReport struct {
	Records int      // valid records found and applied
	Damage  []string // what was damaged, one line each
}

func readMeta(tx *bbolt.Tx, key []byte) uint64 {
	if v := tx.Bucket(bucketMeta).Get(key); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func putMeta(tx *bbolt.Tx, key []byte, v uint64) error {
	return tx.Bucket(bucketMeta).Put(key, binary.BigEndian.AppendUint64(nil, v))
}

// scanAfter looks in data from off on for a valid record above last (the
// position the replay has read up to): one whose prev is above last proves
// that acknowledged records are missing at off; ones whose prev is not are
// the rest of the batch the crash tore, or of one whose write failed, and
// are not acknowledged. It returns the highest prev found. It tries every
// offset, since a damaged length hides where the next record starts.
func scanAfter(data []byte, off int, f recordFormat, last uint64, each func(walRecord)) (maxPrev uint64) {
	for i := off; i+recHeader <= len(data); i++ {
		n := binary.BigEndian.Uint32(data[i:])
		if n == 0 || n > maxRecord {
			continue
		}
		r, size, err := decodeRecord(data[i:], f)
		if err != nil || size == 0 || r.lsn <= last {
			continue
		}
		maxPrev = max(maxPrev, r.prev)
		if each != nil {
			each(r)
		}
	}
	return maxPrev
}

// replay applies the log's records that bbolt does not cover into bbolt,
// in one transaction that also records the last position, and removes the
// segment files. Only the batch a crash tore may be unreadable; any other
// damage refuses the open with a LogDamagedError. With salvage set, every
// valid record found anywhere is applied instead (each is a raise-only
// max-merge, so their order does not matter) and the damage is reported.
func replay(db *bbolt.DB, known *keyFilter, base string, salvage *SalvageReport) (nextSeq, nextLSN uint64, err error) {
	paths, seqs, err := segmentPaths(base)
	if err != nil {
		return 0, 0, err
	}
	var ckpt, segHigh, segKeep uint64
	if err := db.View(func(tx *bbolt.Tx) error {
		ckpt, segHigh, segKeep = checkpointed(tx), readMeta(tx, metaWALSeg), readMeta(tx, metaWALKeep)
		return nil
	}); err != nil {
		return 0, 0, err
	}
	damaged := func(e *LogDamagedError) error {
		if salvage == nil {
			return e
		}
		salvage.Damage = append(salvage.Damage, fmt.Sprintf("%s (%s)", e.Segment, e.Reason))
		return nil
	}
	// Every segment bbolt knows was created and not yet covered must exist.
	if segHigh > 0 {
		have := make(map[uint64]bool, len(seqs))
		for _, q := range seqs {
			have[q] = true
		}
		for q := max(segKeep, 1); q <= segHigh; q++ {
			if !have[q] {
				e := &LogDamagedError{Segment: fmt.Sprintf("%s.wal.%d", base, q), Offset: -1, Reason: "the segment is missing"}
				if err := damaged(e); err != nil {
					return 0, 0, err
				}
			}
		}
	}
	var recs []walRecord
	// serving is the last serving mark read in order (serving.go).
	var serving walRecord
	// read is the last position read in order; every position at or below
	// ckpt is in bbolt, so what the log must show reaches max(read, ckpt).
	var read uint64
	for i, p := range paths {
		nextSeq = seqs[i] + 1
		data, err := os.ReadFile(p)
		if err != nil {
			return 0, 0, err
		}
		f, off, size, herr := parseSegmentHeader(data)
		// A segment whose creation bbolt recorded had its header synced
		// before its first append; one above it was created by a process
		// that crashed before appending to it, or by an earlier version.
		recorded := seqs[i] <= segHigh
		switch {
		case herr != nil && !recorded:
			continue
		case recorded && (herr != nil || f != formatCurrent):
			if herr == nil {
				herr = errors.New("the segment header is missing (the file was truncated or overwritten)")
			}
			if err := damaged(&LogDamagedError{Segment: p, Offset: 0, Reason: herr.Error()}); err != nil {
				return 0, 0, err
			}
			if salvage != nil {
				scanAfter(data, 0, formatCurrent, ckpt, func(r walRecord) {
					if !r.mark() {
						recs = append(recs, r)
					}
				})
			}
			continue
		case f == formatCurrent && int64(len(data)) < size:
			if err := damaged(&LogDamagedError{Segment: p, Offset: int64(len(data)),
				Reason: fmt.Sprintf("the segment is truncated (%d of %d bytes)", len(data), size)}); err != nil {
				return 0, 0, err
			}
		}
		for {
			// A position at or below one read before is what a failed
			// write left behind the batch that took its place: not read.
			r, n, _ := decodeRecord(data[off:], f)
			if n == 0 || r.lsn <= read {
				break
			}
			if r.prev > max(read, ckpt) {
				e := &LogDamagedError{Segment: p, Offset: int64(off),
					Reason: fmt.Sprintf("records up to log position %d were acknowledged, the log is readable up to %d", r.prev, max(read, ckpt))}
				if err := damaged(e); err != nil {
					return 0, 0, err
				}
			}
			read = r.lsn
			if !r.mark() {
				recs = append(recs, r)
			} else if r.token != 0 {
				serving = r
			}
			off += n
		}
		// Where the readable records of this segment end: only a torn batch
		// may follow, with no record vouching for a position above last.
		var each func(walRecord)
		if salvage != nil {
			each = func(r walRecord) {
				if !r.mark() {
					recs = append(recs, r)
				}
			}
		}
		last := max(read, ckpt)
		if mp := scanAfter(data, off, f, last, each); mp > last {
			e := &LogDamagedError{Segment: p, Offset: int64(off),
				Reason: fmt.Sprintf("a damaged record, followed by records that show positions up to %d were acknowledged (readable up to %d)", mp, last)}
			if err := damaged(e); err != nil {
				return 0, 0, err
			}
		}
	}
	last := max(read, ckpt)
	if salvage != nil {
		salvage.Records = len(recs)
		for _, r := range recs {
			last = max(last, r.lsn)
		}
	}
	nextSeq = max(nextSeq, segHigh+1, 1)
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, rec := range recs {
			if rec.lsn <= ckpt {
				continue
			}
			r, err := getFence(tx, rec.resource)
			if err != nil {
				return err
			}
			e := pendingEntry{highest: rec.token, owner: rec.owner, at: time.Unix(0, rec.at).UTC(), lsn: rec.lsn}
			if m := e.merge(r, ckpt); m.Highest != r.Highest {
				if err := putFence(tx, known, rec.resource, m); err != nil {
					return err
				}
			}
		}
		if serving.lsn > ckpt {
			if err := putServing(tx, uint64(serving.token)); err != nil {
				return err
			}
		}
		// The segments are removed next: none is needed any more.
		if err := putMeta(tx, metaWALKeep, nextSeq); err != nil {
			return err
		}
		if err := putMeta(tx, metaWALSeg, nextSeq-1); err != nil {
			return err
		}
		if last > ckpt {
			ckpt = last
			return putMeta(tx, metaWALLSN, last)
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
	return nextSeq, ckpt + 1, nil
}

func newAdvanceLog(s *Store, nextSeq, nextLSN uint64) *advanceLog {
	w := &advanceLog{s: s, base: s.path, done: make(chan struct{}), nextSeq: nextSeq, nextLSN: nextLSN, acked: nextLSN - 1,
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

// mark logs a serving record (a mark with token serving, serving.go) and
// returns once it is durable. Until the log's first segment exists (none
// since Open, whose replay removed them), a serving record is written into
// bbolt instead: creating a segment allocates 8 MiB, which a nearly full
// disk refuses, and a gateway whose advances are refused there must still
// serve repeated tokens (TestFullDiskHealsWithoutRestart). No logged mark
// can then be newer, and every later one is.
func (w *advanceLog) mark(ctx context.Context, serving uint64) error {
	if serving != 0 {
		w.appendMu.Lock()
		if w.seg == nil && len(w.full) == 0 && w.err == nil {
			err := w.s.db.Update(func(tx *bbolt.Tx) error { return putServing(tx, serving) })
			w.appendMu.Unlock()
			return err
		}
		w.appendMu.Unlock()
	}
	a := &advance{mark: true, serving: serving, done: make(chan error, 1)}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.queue = append(w.queue, a)
	w.cond.Signal()
	w.mu.Unlock()
	select {
	case err := <-a.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
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
		logged, err := w.write(batch)
		for i, a := range batch {
			a.done <- cmp.Or(err, a.err) // a may be reused from here on
			batch[i] = nil
		}
		if logged {
			w.armMark()
		}
	}
}

// armMark schedules a mark after markDelay: if no other batch comes by
// then (whose records would vouch for this one), the mark does.
func (w *advanceLog) armMark() {
	if w.markTimer == nil {
		w.markTimer = time.AfterFunc(markDelay, w.queueMark)
		return
	}
	w.markTimer.Reset(markDelay)
}

func (w *advanceLog) queueMark() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(w.queue) > 0 {
		return // the next batch vouches for the last one
	}
	a := &advance{mark: true, done: make(chan error, 1)}
	w.queue = append(w.queue, a)
	w.cond.Signal()
}

// write logs the advances of batch that raise a fence (and its marks),
// fdatasyncs once, applies them to pending and sets every advance's
// result. It reports whether it logged an advance.
func (w *advanceLog) write(batch []*advance) (bool, error) {
	w.appendMu.Lock()
	defer w.appendMu.Unlock()
	if w.err != nil {
		return false, w.err
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
		if e, ok := s.pending.m[a.resource]; ok && !a.mark {
			inPending[a.resource] = e
		}
	}
	s.pending.mu.RUnlock()
	read := false
	for _, a := range batch {
		switch {
		case a.mark:
		case s.known.mayHave(a.resource):
			read = true
		default:
			cur[a.resource] = inPending[a.resource].merge(fenceRecord{}, 0)
		}
	}
	if read {
		if err := s.db.View(w.readCurrent(batch)); err != nil {
			return false, err
		}
	}
	now := time.Now().UTC()
	buf := w.buf[:0]
	logged := w.logged[:0]
	advances := 0
	for _, a := range batch {
		rec := walRecord{lsn: w.nextLSN + uint64(len(logged)), prev: w.acked, at: now.UnixNano()}
		if a.mark {
			rec.token = int64(a.serving)
			buf = rec.appendTo(buf)
			logged = append(logged, rec)
			continue
		}
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
			rec.token, rec.resource, rec.owner = a.token, a.resource, a.owner
			buf = rec.appendTo(buf)
			logged = append(logged, rec)
			advances++
		}
		a.result = r
	}
	w.buf, w.logged = buf, logged
	if len(logged) == 0 {
		return false, nil
	}
	// The positions are used up whether or not the append succeeds: after
	// a failed write, what it left in the segment has positions below the
	// next batch's, which the replay tells apart from acknowledged ones.
	w.nextLSN += uint64(len(logged))
	if err := w.append(buf); err != nil {
		return false, w.fail(err)
	}
	w.ok()
	w.acked = logged[len(logged)-1].lsn
	w.seg.last = w.acked
	for _, rec := range logged {
		if rec.mark() && rec.token != 0 {
			w.serving, w.servingLSN = uint64(rec.token), rec.lsn
		}
	}
	w.syncs.Add(1)
	w.batches.Add(1)
	w.changes.Add(uint64(advances))
	if advances == 0 {
		return false, nil
	}
	s.pending.mu.Lock()
	if len(s.pending.m) == 0 {
		s.pending.since = now
	}
	for _, rec := range logged {
		if rec.mark() {
			continue
		}
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
	return true, nil
}

// errSync marks an append error from fdatasync, after which the log is
// unusable.
type errSync struct{ err error }

func (e errSync) Error() string { return "fdatasync: " + e.err.Error() }
func (e errSync) Unwrap() error { return e.err }

// fail records an append error: sticky for a failed fdatasync, until the
// next successful batch for the others. Both are logged and counted.
func (w *advanceLog) fail(err error) error {
	w.writeErrors.Add(1)
	var se errSync
	if errors.As(err, &se) {
		w.err = fmt.Errorf("advance log: %w (the log cannot be trusted after a failed sync: restart the process)", err)
		w.s.logger.Error("advance log failed: refusing every new fence advance until restarted", "err", err)
		return w.err
	}
	err = fmt.Errorf("advance log: %w", err)
	if w.failing.Swap(&err) == nil {
		w.s.logger.Error("advance log cannot append: new fence advances are refused until it can", "err", err)
	}
	return err
}

// ok clears a failure that put nothing at risk.
func (w *advanceLog) ok() {
	if w.failing.Swap(nil) != nil {
		w.s.logger.Info("advance log appends again")
	}
}

// health reports why the log cannot take advances, if it cannot. After a
// failure that heals, it tries: a mark written and synced proves that the
// log appends again (a replica taken out of service by its readiness
// probe gets no advances that would show it).
func (w *advanceLog) health(ctx context.Context) error {
	w.appendMu.Lock()
	err := w.err
	w.appendMu.Unlock()
	if err != nil || w.failing.Load() == nil {
		return err
	}
	return w.mark(ctx, 0)
}

// logState is the advance log's state for the metrics: 0 appending, 1
// failing until the cause goes away, 2 failed until restarted.
func (w *advanceLog) logState() int {
	w.appendMu.Lock()
	defer w.appendMu.Unlock()
	switch {
	case w.err != nil:
		return 2
	case w.failing.Load() != nil:
		return 1
	}
	return 0
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
		seg, err := w.newSegment(max(segmentSize, segHeaderSize+int64(len(b))+recHeader))
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
		return errSync{err}
	}
	w.seg.off += int64(len(b))
	return nil
}

// newSegment creates a segment file of size bytes, a header and zeros,
// synced with its directory entry, and records in bbolt that it exists.
// On failure nothing is left behind and its number is used again, so the
// segments bbolt knows of stay contiguous.
func (w *advanceLog) newSegment(size int64) (seg *segment, err error) {
	seq := w.nextSeq
	p := fmt.Sprintf("%s.wal.%d", w.base, seq)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(p)
		}
	}()
	zeros := make([]byte, 1<<20)
	copy(zeros, segmentHeader(seq, size))
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.Write(zeros[:min(int64(len(zeros)), size-off)]); err != nil {
			return nil, err
		}
		if off == 0 {
			clear(zeros[:segHeaderSize])
		}
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return nil, err
	}
	if err := w.s.db.Update(func(tx *bbolt.Tx) error { return putMeta(tx, metaWALSeg, seq) }); err != nil {
		return nil, fmt.Errorf("record log segment: %w", err)
	}
	w.nextSeq++
	w.syncs.Add(4)
	return &segment{f: f, path: p, seq: seq, off: segHeaderSize, size: size}, nil
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
		// An error leaves the records in the log (nothing acknowledged is at
		// risk) and the next checkpoint retries; the log grows meanwhile.
		if err := w.checkpoint(nil); err != nil {
			w.checkpointErrors.Add(1)
			w.s.logger.Error("advance log checkpoint failed; the advances stay in the log and the next checkpoint retries", "err", err)
		}
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
	upto := w.acked
	serving, servingLSN := w.serving, w.servingLSN
	servingDirty := servingLSN > w.servingSaved
	// The lowest segment a replay still needs after this checkpoint: the
	// current one, and any older one with records above upto.
	keepSeq := w.nextSeq
	if w.seg != nil {
		keepSeq = w.seg.seq
	}
	for _, seg := range w.full {
		if seg.last > upto {
			keepSeq = min(keepSeq, seg.seq)
		}
	}
	s.pending.mu.RLock()
	snap := make(map[string]pendingEntry, len(s.pending.m))
	keys := make([]string, 0, len(s.pending.m))
	for k, e := range s.pending.m {
		snap[k] = e
		keys = append(keys, k)
	}
	s.pending.mu.RUnlock()
	if fn == nil {
		if len(snap) == 0 && !servingDirty {
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
				if err := putMeta(tx, metaWALLSN, upto); err != nil {
					return err
				}
			}
			if keepSeq > readMeta(tx, metaWALKeep) {
				if err := putMeta(tx, metaWALKeep, keepSeq); err != nil {
					return err
				}
			}
			if servingDirty {
				if err := putServing(tx, serving); err != nil {
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
	w.servingSaved = max(w.servingSaved, servingLSN)
	// Only segments below the lowest one still needed go: bbolt now says
	// every one from keepSeq on exists.
	keep := w.full[:0]
	for _, seg := range w.full {
		if seg.seq < keepSeq {
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
	if w.markTimer != nil {
		w.markTimer.Stop()
	}
	err := w.checkpoint(nil)
	w.appendMu.Lock()
	defer w.appendMu.Unlock()
	segs := w.full
	if w.seg != nil {
		segs = append(segs, w.seg)
	}
	remove := err == nil && w.err == nil
	if remove && len(segs) > 0 {
		// Everything is in bbolt: no segment is needed any more.
		err = w.s.db.Update(func(tx *bbolt.Tx) error { return putMeta(tx, metaWALKeep, w.nextSeq) })
		remove = err == nil
	}
	for _, seg := range segs {
		seg.f.Close()
		if remove {
			os.Remove(seg.path)
		}
	}
	w.full, w.seg = nil, nil
	return err
}

// fdatasync is a variable so that a test can make it fail as a disk does.
var fdatasync = func(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
