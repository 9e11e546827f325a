// Package snapshot is the file format of a node's saved key states
// (node.Config.StateDir): a versioned header, one record per key state, and a
// trailer with the record count and a CRC-32C of everything before it.
//
// Data flow: the node streams the states of its store through a Writer (one
// Add per state, then Close) into a temporary file that it syncs and renames
// over the previous snapshot, so a reader sees the old file or the new one,
// never half of one. At start it reads the whole file: Open checks the magic,
// the version and the checksum, Check reads every record once, and only then
// does the node install them (Reader.Next), so a file that fails any check
// yields no state at all. The records
// are untrusted input all the same: the node judges each one as it judges a
// state a peer hands off to it.
//
// Layout (integers little-endian; varints as encoding/binary):
//
//	magic     8 bytes  "RLSNAP\r\n"
//	version   uint16   Version
//	cluster   uvarint length, bytes    (Config.ClusterLabel of the writer)
//	node      uvarint length, bytes    (Config.Name of the writer)
//	written   varint   Unix ns
//	records   each either a key state: tag 1, key hash uint64, kind byte,
//	          varint limit, varint period (ns), varint burst, varint last
//	          check (Unix ns), flags byte (bit 0: caller clock), uvarint
//	          length, the state (algo.State.MarshalBinary);
//	          or a ban state (node.AllowPenalized): tag 2, uvarint length,
//	          the key, varint ban end (Unix ns, 0: none), varint expiry
//	          (Unix ns), uvarint count (at most algo.MaxPenaltyDenials),
//	          varint denial times (Unix ns)
//	end       tag 0, uvarint record count
//	checksum  uint32   CRC-32C (Castagnoli) of every byte before it
package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// Version is the format version this package writes and reads.
const Version = 1

// magic opens every snapshot file.
const magic = "RLSNAP\r\n"

// Record tags.
const (
	tagEnd    = 0
	tagRecord = 1
	tagBan    = 2
)

// maxString bounds the cluster label and the node name in a header.
const maxString = 1 << 10

// MaxKeyLen bounds the key of a ban record (the node refuses keys longer
// than its own Config.MaxKeyLen).
const MaxKeyLen = 1 << 16

// Errors of Open and Reader.Next: each wraps ErrCorrupt or ErrVersion.
var (
	// ErrCorrupt: the input is not a whole snapshot (wrong magic, torn,
	// checksum mismatch, a record that does not parse, bytes after the end).
	ErrCorrupt = errors.New("snapshot: corrupt or not a snapshot")
	// ErrVersion: a snapshot of a format version this package does not read.
	ErrVersion = errors.New("snapshot: unsupported version")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header describes a snapshot: who wrote it and when.
type Header struct {
	// Cluster is the writer's Config.ClusterLabel.
	Cluster string
	// Node is the writer's Config.Name.
	Node string
	// Written is when the snapshot began, Unix ns (the writer's clock).
	Written int64
}

// Record is one saved key state.
type Record struct {
	// KeyHash is the key's ring hash (ring.Snapshot.Hash).
	KeyHash uint64
	// Limit is the Limit the state was last written under.
	Limit algo.Limit
	// LastNow is the key's last check time, Unix ns (the caller's time when
	// CallerClock).
	LastNow int64
	// CallerClock: LastNow and the state's times are a caller's timestamps.
	CallerClock bool
	// State is the algo.State in its MarshalBinary form. A Reader's records
	// alias the bytes given to Open.
	State []byte
	// Ban, when not nil, makes this record a ban state (and every field
	// above zero).
	Ban *Ban
}

// Ban is the saved ban state of one penalized key.
type Ban struct {
	// Key is the key (ban states are kept by key, not by hash).
	Key string
	// BanUntil is the end of the key's ban, Unix ns; 0: not banned.
	BanUntil int64
	// Expire is when the state decides nothing any more, Unix ns.
	Expire int64
	// Denials are the times of the key's recent denied checks, Unix ns,
	// oldest first, at most algo.MaxPenaltyDenials.
	Denials []int64
}

// Writer writes a snapshot to an io.Writer: NewWriter, Add per state, Close.
// Not safe for concurrent use.
type Writer struct {
	w   *bufio.Writer
	crc hash.Hash32
	buf []byte
	n   uint64
	err error
}

// NewWriter writes the magic, Version and h to w and returns the Writer of
// the records. Writes to w are buffered; Close flushes them.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	if len(h.Cluster) > maxString || len(h.Node) > maxString {
		return nil, fmt.Errorf("snapshot: header strings longer than %d bytes", maxString)
	}
	crc := crc32.New(castagnoli)
	sw := &Writer{w: bufio.NewWriterSize(io.MultiWriter(w, crc), 1<<16), crc: crc}
	b := append([]byte(magic), 0, 0)
	binary.LittleEndian.PutUint16(b[len(magic):], Version)
	b = appendString(b, h.Cluster)
	b = appendString(b, h.Node)
	b = binary.AppendVarint(b, h.Written)
	sw.write(b)
	return sw, sw.err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func (w *Writer) write(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

// Add appends the record of one key state: st under l, last checked at
// lastNow. It returns the first error met so far (the underlying writer's, or
// a State of no valid Kind).
func (w *Writer) Add(keyHash uint64, l algo.Limit, st *algo.State, lastNow int64, callerClock bool) error {
	if w.err != nil {
		return w.err
	}
	b := append(w.buf[:0], tagRecord)
	b = binary.LittleEndian.AppendUint64(b, keyHash)
	b = append(b, byte(l.Kind))
	b = binary.AppendVarint(b, l.Limit)
	b = binary.AppendVarint(b, int64(l.Period))
	b = binary.AppendVarint(b, l.Burst)
	b = binary.AppendVarint(b, lastNow)
	var flags byte
	if callerClock {
		flags |= 1
	}
	b = append(b, flags)
	lenAt := len(b)
	b = append(b, make([]byte, binary.MaxVarintLen64)...) // room for the length
	var err error
	b, err = st.AppendBinary(b)
	if err != nil {
		w.err = fmt.Errorf("snapshot: %w", err)
		return w.err
	}
	stateLen := len(b) - lenAt - binary.MaxVarintLen64
	// Move the state left over the unused part of the length's room.
	k := binary.PutUvarint(b[lenAt:], uint64(stateLen))
	copy(b[lenAt+k:], b[lenAt+binary.MaxVarintLen64:])
	b = b[:lenAt+k+stateLen]
	w.buf = b
	w.write(b)
	w.n++
	return w.err
}

// AddBan appends the record of one ban state. A key longer than MaxKeyLen or
// more than algo.MaxPenaltyDenials denials are an error (nothing is written).
func (w *Writer) AddBan(b Ban) error {
	if w.err != nil {
		return w.err
	}
	if len(b.Key) > MaxKeyLen || len(b.Denials) > algo.MaxPenaltyDenials {
		return fmt.Errorf("snapshot: ban state of a %d-byte key with %d denials: above the bounds", len(b.Key), len(b.Denials))
	}
	buf := append(w.buf[:0], tagBan)
	buf = appendString(buf, b.Key)
	buf = binary.AppendVarint(buf, b.BanUntil)
	buf = binary.AppendVarint(buf, b.Expire)
	buf = binary.AppendUvarint(buf, uint64(len(b.Denials)))
	for _, t := range b.Denials {
		buf = binary.AppendVarint(buf, t)
	}
	w.buf = buf
	w.write(buf)
	w.n++
	return w.err
}

// Records returns the number of records added.
func (w *Writer) Records() uint64 { return w.n }

// Close writes the end tag, the record count and the checksum, and flushes.
// It does not close the underlying writer.
func (w *Writer) Close() error {
	b := binary.AppendUvarint([]byte{tagEnd}, w.n)
	w.write(b)
	if w.err == nil {
		w.err = w.w.Flush()
	}
	if w.err != nil {
		return w.err
	}
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], w.crc.Sum32())
	w.write(sum[:]) // also fed to the checksum, after it was read: harmless
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

// Reader reads the records of a snapshot that Open checked.
type Reader struct {
	// Header is the snapshot's header.
	Header Header
	r      reader
	n      uint64
	done   bool
}

// Open checks that b is one whole snapshot of this Version (magic, version,
// checksum), decodes its header and returns the Reader of its records. A
// check that fails returns an error wrapping ErrCorrupt or ErrVersion. Open
// never panics on any input, and keeps b: records alias it.
func Open(b []byte) (*Reader, error) {
	if len(b) < len(magic)+2+4 || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: no snapshot magic", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[len(magic):]); v != Version {
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrVersion, v, Version)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: checksum %08x, the file says %08x (torn or altered)", ErrCorrupt, got, sum)
	}
	rd := &Reader{r: reader{b: body[len(magic)+2:]}}
	rd.Header.Cluster = rd.r.str()
	rd.Header.Node = rd.r.str()
	rd.Header.Written = rd.r.varint()
	if rd.r.err != nil {
		return nil, rd.r.err
	}
	return rd, nil
}

// Next returns the next record; ok is false at the end of the records (then
// err is nil if the snapshot ended as a Writer ends it: the record count
// matches and nothing follows). A record that does not parse returns an
// error wrapping ErrCorrupt (the checksum matched, so a foreign or buggy
// writer); every call after an error or the end returns the same.
func (rd *Reader) Next() (rec Record, ok bool, err error) {
	r := &rd.r
	if rd.done || r.err != nil {
		return rec, false, r.err
	}
	switch tag := r.byte(); {
	case r.err != nil:
		return rec, false, r.err
	case tag == tagEnd:
		rd.done = true
		count := r.uvarint()
		switch {
		case r.err != nil:
		case count != rd.n:
			r.err = fmt.Errorf("%w: %d records, the end says %d", ErrCorrupt, rd.n, count)
		case len(r.b) != 0:
			r.err = fmt.Errorf("%w: %d bytes after the end", ErrCorrupt, len(r.b))
		}
		return rec, false, r.err
	case tag == tagBan:
		return rd.ban()
	case tag != tagRecord:
		r.err = fmt.Errorf("%w: record %d: tag %d", ErrCorrupt, rd.n, tag)
		return rec, false, r.err
	}
	rec.KeyHash = r.uint64()
	rec.Limit.Kind = algo.Kind(r.byte())
	rec.Limit.Limit = r.varint()
	rec.Limit.Period = time.Duration(r.varint())
	rec.Limit.Burst = r.varint()
	rec.LastNow = r.varint()
	flags := r.byte()
	rec.CallerClock = flags&1 != 0
	rec.State = r.bytes()
	if r.err == nil && flags&^1 != 0 {
		r.err = fmt.Errorf("%w: record %d: flags %#x", ErrCorrupt, rd.n, flags)
	}
	if r.err != nil {
		return Record{}, false, r.err
	}
	rd.n++
	return rec, true, nil
}

// ban reads a ban record after its tag.
func (rd *Reader) ban() (Record, bool, error) {
	r := &rd.r
	var b Ban
	key := r.bytes()
	if r.err == nil && len(key) > MaxKeyLen {
		r.fail("ban key length")
	}
	b.Key = string(key)
	b.BanUntil = r.varint()
	b.Expire = r.varint()
	n := r.uvarint()
	if r.err == nil && n > algo.MaxPenaltyDenials {
		r.fail("ban denial count")
	}
	if r.err == nil && n > 0 {
		b.Denials = make([]int64, n)
		for i := range b.Denials {
			b.Denials[i] = r.varint()
		}
	}
	if r.err != nil {
		return Record{}, false, fmt.Errorf("record %d: %w", rd.n, r.err)
	}
	rd.n++
	return Record{Ban: &b}, true, nil
}

// Records returns the number of records Next has returned.
func (rd *Reader) Records() uint64 { return rd.n }

// Check reads every record of b without keeping any and returns the header
// and the record count, or the first error of Open or Next: a snapshot that
// passes Check reads whole.
func Check(b []byte) (Header, uint64, error) {
	rd, err := Open(b)
	if err != nil {
		return Header{}, 0, err
	}
	for {
		_, ok, err := rd.Next()
		if err != nil {
			return rd.Header, rd.n, err
		}
		if !ok {
			return rd.Header, rd.n, nil
		}
	}
}

// reader reads b front to back; the first short or invalid read sets err
// (wrapping ErrCorrupt) and every later read returns zero.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or invalid %s", ErrCorrupt, what)
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.fail("byte")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uint64() uint64 {
	if len(r.b) < 8 {
		r.fail("key hash")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) varint() int64 {
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) uvarint() uint64 {
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.fail("uvarint")
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("length")
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) str() string {
	b := r.bytes()
	if len(b) > maxString {
		r.fail("header string")
		return ""
	}
	return string(b)
}
