package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
)

// sample returns states of every algorithm after a few checks on a fixed
// timeline, with their Limits.
func sample(t testing.TB) ([]algo.Limit, []algo.State) {
	t.Helper()
	const t0 = int64(1_700_000_000_000_000_000)
	ls := []algo.Limit{
		{Kind: algo.SlidingWindowLog, Limit: 5, Period: time.Minute},
		{Kind: algo.SlidingWindowCounter, Limit: 5, Period: time.Minute},
		{Kind: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour},
		{Kind: algo.GCRA, Limit: 10, Period: time.Second, Burst: 3},
		{Kind: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 4},
		{Kind: algo.BucketedSlidingWindow, Limit: 100, Period: time.Hour},
	}
	sts := make([]algo.State, len(ls))
	for i, l := range ls {
		for k := range 3 {
			if _, err := sts[i].Take(t0+int64(k)*int64(time.Millisecond), 1, l); err != nil {
				t.Fatalf("%v: %v", l.Kind, err)
			}
		}
	}
	return ls, sts
}

// sampleBan is the ban record encode appends after the key states.
var sampleBan = Ban{Key: "user:42", BanUntil: 1_700_000_600_000_000_000, Expire: 1_700_000_700_000_000_000,
	Denials: []int64{1_700_000_000_000_000_000, 1_700_000_001_000_000_000}}

func encode(t testing.TB, h Header, ls []algo.Limit, sts []algo.State) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ls {
		if err := w.Add(uint64(i)*0x9e3779b97f4a7c15+1, ls[i], &sts[i], int64(1000+i), i%2 == 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(ls) > 0 {
		if err := w.AddBan(sampleBan); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	ls, sts := sample(t)
	h := Header{Cluster: "ringlimit", Node: "node-0", Written: 1_700_000_000_123_456_789}
	b := encode(t, h, ls, sts)
	rd, err := Open(b)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Header != h {
		t.Errorf("header: got %+v, want %+v", rd.Header, h)
	}
	for i := 0; ; i++ {
		r, ok, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if i != len(ls)+1 {
				t.Fatalf("records: got %d, want %d", i, len(ls)+1)
			}
			break
		}
		if i == len(ls) {
			if r.Ban == nil || !reflect.DeepEqual(*r.Ban, sampleBan) {
				t.Errorf("ban record: got %+v, want %+v", r.Ban, sampleBan)
			}
			continue
		}
		if r.Ban != nil {
			t.Fatalf("record %d: got a ban record, want a key state", i)
		}
		if want := uint64(i)*0x9e3779b97f4a7c15 + 1; r.KeyHash != want {
			t.Errorf("record %d: hash got %x, want %x", i, r.KeyHash, want)
		}
		if r.Limit != ls[i] || r.LastNow != int64(1000+i) || r.CallerClock != (i%2 == 1) {
			t.Errorf("record %d: got %+v %d %v, want %+v %d %v", i, r.Limit, r.LastNow, r.CallerClock, ls[i], 1000+i, i%2 == 1)
		}
		var st algo.State
		if err := st.UnmarshalBinary(r.State); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		want, _ := sts[i].MarshalBinary()
		if !bytes.Equal(r.State, want) {
			t.Errorf("record %d: state got %x, want %x", i, r.State, want)
		}
	}
	if _, n, err := Check(b); err != nil || n != uint64(len(ls)+1) {
		t.Errorf("Check: got %d, %v; want %d, nil", n, err, len(ls)+1)
	}
}

func TestEmptySnapshot(t *testing.T) {
	b := encode(t, Header{Cluster: "c"}, nil, nil)
	if h, n, err := Check(b); err != nil || n != 0 || h.Cluster != "c" {
		t.Errorf("got %+v %d %v, want cluster c, 0 records, nil", h, n, err)
	}
}

// TestRefused: a torn file (every strict prefix), a flipped bit anywhere, a
// foreign file and another version are refused before any record is read.
func TestRefused(t *testing.T) {
	ls, sts := sample(t)
	b := encode(t, Header{Cluster: "ringlimit", Node: "n"}, ls, sts)
	for k := 0; k < len(b); k++ {
		if _, err := Open(b[:k]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d of %d bytes: got %v, want ErrCorrupt", k, len(b), err)
		}
	}
	for k := 0; k < len(b); k++ {
		c := bytes.Clone(b)
		c[k] ^= 0x10
		_, err := Open(c)
		if k == len(magic) || k == len(magic)+1 { // the version's bytes
			if !errors.Is(err, ErrVersion) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("bit flipped in byte %d: got %v, want ErrVersion", k, err)
			}
			continue
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit flipped in byte %d: got %v, want ErrCorrupt", k, err)
		}
	}
	if _, err := Open([]byte("{\"not\": \"a snapshot\"}\n")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("foreign file: got %v, want ErrCorrupt", err)
	}
	c := bytes.Clone(b)
	c[len(magic)] = Version + 1
	if _, err := Open(c); !errors.Is(err, ErrVersion) {
		t.Errorf("version %d: got %v, want ErrVersion", Version+1, err)
	}
}

// FuzzOpen: no input makes Open or Next panic, and a snapshot that reads
// whole reads the same when written again. Each input is also tried with its
// last 4 bytes replaced by the checksum of the rest, so that the fuzzer
// reaches the header and record parsers.
func FuzzOpen(f *testing.F) {
	ls, sts := sample(f)
	f.Add(encode(f, Header{Cluster: "ringlimit", Node: "node-0", Written: 42}, ls, sts))
	f.Add(encode(f, Header{}, nil, nil))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzOne(t, b)
		if len(b) >= 4 {
			fixed := bytes.Clone(b)
			binary.LittleEndian.PutUint32(fixed[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
			fuzzOne(t, fixed)
		}
	})
}

func fuzzOne(t *testing.T, b []byte) {
	rd, err := Open(b)
	if err != nil {
		return
	}
	var recs []Record
	for {
		r, ok, err := rd.Next()
		if err != nil {
			return
		}
		if !ok {
			break
		}
		recs = append(recs, r)
	}
	// Written again through a Writer, the records that hold valid states
	// read back equal.
	var buf bytes.Buffer
	w, err := NewWriter(&buf, rd.Header)
	if err != nil {
		return // a header string too long to write
	}
	var kept []Record
	for _, r := range recs {
		var st algo.State
		if st.UnmarshalBinary(r.State) != nil {
			continue
		}
		if err := w.Add(r.KeyHash, r.Limit, &st, r.LastNow, r.CallerClock); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rd2, err := Open(buf.Bytes())
	if err != nil {
		t.Fatalf("rewritten snapshot refused: %v", err)
	}
	for i := range kept {
		r, ok, err := rd2.Next()
		if err != nil || !ok {
			t.Fatalf("rewritten record %d: ok %v, err %v", i, ok, err)
		}
		if r.KeyHash != kept[i].KeyHash || r.Limit != kept[i].Limit || r.LastNow != kept[i].LastNow || r.CallerClock != kept[i].CallerClock {
			t.Fatalf("rewritten record %d: got %+v, want %+v", i, r, kept[i])
		}
	}
}
