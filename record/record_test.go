package record

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

func gpus(sm float64) *sample.GPUs {
	v := sample.NewValues()
	v.Set(sample.SMActive, sm)
	return &sample.GPUs{Backend: "nvml", Devices: []sample.GPU{{Index: 0, UUID: "GPU-0", Up: true, Values: v}}}
}

func readAll(t *testing.T, path string) ([]Frame, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewReader(f)
	if err != nil {
		return nil, err
	}
	var out []Frame
	for {
		fr, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, fr)
	}
}

func TestRoundTripAndAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.gdrec")
	t0 := time.Unix(1_800_000_000, 123)
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := w.Write("gpu", t0.Add(time.Duration(i)*time.Second), gpus(0.25*float64(i))); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	// Reopening appends after the existing frames.
	w, _ = Create(path)
	w.Write("pressure", t0.Add(3*time.Second), &sample.Pressure{IntervalSeconds: 1})
	w.Close()

	frames, err := readAll(t, path)
	if err != nil || len(frames) != 4 {
		t.Fatalf("%d frames, err %v", len(frames), err)
	}
	if frames[3].Collector != "pressure" || !frames[1].Time().Equal(t0.Add(time.Second)) {
		t.Fatalf("frames %+v", frames)
	}
	var g sample.GPUs
	if err := json.Unmarshal(frames[2].Sample, &g); err != nil {
		t.Fatal(err)
	}
	if sm, _ := g.Devices[0].Values.Get(sample.SMActive); sm != 0.5 {
		t.Fatalf("SM %v after round trip", sm)
	}
}

// A crash mid-write leaves a torn frame: the reader names its offset and
// keeps everything before it; a writer reopening the file cuts it off.
func TestTornFrame(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.gdrec")
	w, _ := Create(path)
	w.Write("gpu", time.Unix(1, 0), gpus(0.1))
	w.Write("gpu", time.Unix(2, 0), gpus(0.2))
	w.Close()
	st, _ := os.Stat(path)
	if err := os.Truncate(path, st.Size()-5); err != nil {
		t.Fatal(err)
	}
	frames, err := readAll(t, path)
	if len(frames) != 1 || !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "offset ") {
		t.Fatalf("frames %d, err %v", len(frames), err)
	}
	w, err = Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if cut, _ := os.Stat(path); w.TornBytes != st.Size()-5-cut.Size() || w.TornBytes <= 0 {
		t.Errorf("TornBytes %d; want the %d bytes cut", w.TornBytes, st.Size()-5-cut.Size())
	}
	w.Write("gpu", time.Unix(3, 0), gpus(0.3))
	w.Close()
	frames, err = readAll(t, path)
	if err != nil || len(frames) != 2 || frames[1].UnixNano != time.Unix(3, 0).UnixNano() {
		t.Fatalf("after reopen: %d frames, err %v", len(frames), err)
	}
}

func TestCorruptionNamesOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.gdrec")
	w, _ := Create(path)
	w.Write("gpu", time.Unix(1, 0), gpus(0.1))
	first := w.Bytes
	w.Write("gpu", time.Unix(2, 0), gpus(0.2))
	w.Close()
	b, _ := os.ReadFile(path)
	b[len(Magic)+int(first)+12] ^= 0xff // a byte inside the second frame's payload
	os.WriteFile(path, b, 0o644)
	_, err := readAll(t, path)
	want := "frame at offset " + strconv.Itoa(len(Magic)+int(first)) + ": checksum mismatch"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v; want %q", err, want)
	}
	// Garbage lengths do not allocate gigabytes.
	copy(b[len(Magic):], []byte{0xff, 0xff, 0xff, 0x7f})
	os.WriteFile(path, b, 0o644)
	if _, err := readAll(t, path); err == nil || !strings.Contains(err.Error(), "corrupt length") {
		t.Fatalf("err %v", err)
	}
}

func TestNotARecord(t *testing.T) {
	for content, want := range map[string]string{
		"hello world, this is not it": "bad magic",
		"GPUDIAG-RECORD-9\n":          "not supported",
		"GPU":                         "not a gpudiag record",
	} {
		path := filepath.Join(t.TempDir(), "x")
		os.WriteFile(path, []byte(content), 0o644)
		if _, err := readAll(t, path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v; want %q", content, err, want)
		}
		if _, err := Create(path); err == nil {
			t.Errorf("%q: appending to a non-record succeeded", content)
		}
	}
}

// fullDisk is a record file on a disk that holds at most limit bytes of it:
// a write that does not fit writes what fits and fails with ENOSPC, as
// write(2) does. failTruncate makes cutting back fail too.
type fullDisk struct {
	*os.File
	limit        int64
	failTruncate bool
}

func (d *fullDisk) WriteAt(b []byte, off int64) (int, error) {
	if off+int64(len(b)) <= d.limit {
		return d.File.WriteAt(b, off)
	}
	n, _ := d.File.WriteAt(b[:max(0, d.limit-off)], off)
	return n, &os.PathError{Op: "write", Path: d.Name(), Err: syscall.ENOSPC}
}

func (d *fullDisk) Truncate(size int64) error {
	if d.failTruncate {
		return &os.PathError{Op: "truncate", Path: d.Name(), Err: syscall.EIO}
	}
	return d.File.Truncate(size)
}

// A disk that fills up mid-frame leaves a valid record: every whole frame
// reads back, no torn one; when space returns, frames follow the last whole
// one, even when cutting the torn bytes back failed at the time.
func TestDiskFullMidFrame(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.gdrec")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	disk := &fullDisk{File: w.f.(*os.File), limit: 1 << 40}
	w.f = disk
	t0 := time.Unix(1_800_000_000, 0)
	write := func(i int) error { return w.Write("gpu", t0.Add(time.Duration(i)*time.Second), gpus(float64(i)/100)) }
	size := func() int64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	for i := range 3 {
		if err := write(i); err != nil {
			t.Fatal(err)
		}
	}
	whole := size()

	disk.limit = whole + 20 // room for part of the next frame's header and body
	for i := 3; i < 6; i++ {
		if err := write(i); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "offset "+strconv.FormatInt(whole, 10)) {
			t.Fatalf("write into a full disk: %v; want ENOSPC naming offset %d", err, whole)
		}
		if got := size(); got != whole {
			t.Fatalf("after a failed write the file is %d bytes; want it cut back to %d", got, whole)
		}
	}
	if frames, err := readAll(t, path); err != nil || len(frames) != 3 {
		t.Fatalf("full disk: %d frames, %v; want the 3 whole ones and no error", len(frames), err)
	}

	disk.failTruncate = true // the torn bytes stay this time
	if err := write(6); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write: %v", err)
	}
	if frames, err := readAll(t, path); len(frames) != 3 || !errors.Is(err, ErrTruncated) {
		t.Fatalf("torn tail left: %d frames, %v; want 3 and ErrTruncated", len(frames), err)
	}

	disk.limit, disk.failTruncate = 1<<40, false // space is back
	for i := 7; i < 9; i++ {
		if err := write(i); err != nil {
			t.Fatalf("write after space came back: %v", err)
		}
	}
	frames, err := readAll(t, path)
	if err != nil || len(frames) != 5 {
		t.Fatalf("after recovery: %d frames, %v; want 5 and no error", len(frames), err)
	}
	if !frames[3].Time().Equal(t0.Add(7*time.Second)) || !frames[4].Time().Equal(t0.Add(8*time.Second)) {
		t.Fatalf("recovered frames at %v and %v; want the samples of 7 s and 8 s", frames[3].Time(), frames[4].Time())
	}
	if w.Frames != 5 || w.Bytes != size()-int64(len(Magic)) {
		t.Fatalf("counted %d frames, %d bytes; the file holds 5 frames, %d bytes", w.Frames, w.Bytes, size()-int64(len(Magic)))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A trace is its owner's only: created 0600 whatever the umask, and an
// existing trace open to others is made private before frames are added.
func TestTraceIsPrivate(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	fresh := filepath.Join(dir, "fresh.gdrec")
	w, err := Create(fresh)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	shared := filepath.Join(dir, "shared.gdrec")
	if err := os.WriteFile(shared, []byte(Magic), 0o644); err != nil {
		t.Fatal(err)
	}
	if w, err = Create(shared); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, path := range []string{fresh, shared} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := st.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s: mode %04o; want 0600", filepath.Base(path), perm)
		}
	}
}

// A deflate bomb, a frame of well under 1 MiB that inflates to four times
// the limit, is refused with an error naming its offset, having cost the
// reader a few megabytes.
func TestDeflateBombRefused(t *testing.T) {
	var body bytes.Buffer
	zw, _ := flate.NewWriter(&body, flate.BestSpeed)
	zeros := make([]byte, 1<<20)
	for range 4 * MaxPayload >> 20 {
		zw.Write(zeros)
	}
	zw.Close()
	var file bytes.Buffer
	file.WriteString(Magic)
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(body.Len()))
	binary.LittleEndian.PutUint32(hdr[4:8], crc32.Checksum(body.Bytes(), castagnoli))
	file.Write(hdr[:])
	file.Write(body.Bytes())

	r, err := NewReader(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = r.Next()
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "offset 17") || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a %d-byte frame inflating to %d MiB: %v; want a refusal naming its offset", body.Len(), 4*MaxPayload>>20, err)
	}
	// A bomb is measured past its first megabyte without being kept.
	const ceiling = 16 << 20
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > ceiling {
		t.Errorf("allocated %d MiB to refuse the frame; want at most %d MiB", alloc>>20, ceiling>>20)
	} else {
		t.Logf("allocated %.1f MiB to refuse a %d-byte frame inflating to %d MiB", float64(alloc)/(1<<20), body.Len(), 4*MaxPayload>>20)
	}
}

// The writer refuses a sample larger than a reader would accept.
func TestWriterRefusesOversizedSample(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "trace.gdrec"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	big := &sample.NCCL{Files: []sample.NCCLFile{{Path: strings.Repeat("x", MaxPayload)}}}
	if err := w.Write("nccl", time.Unix(1, 0), big); err == nil || !strings.Contains(err.Error(), "frame limit") {
		t.Fatalf("oversized sample: %v", err)
	}
}

// A sample past the size inflated directly (a big node's NCCL sample) takes
// the measured path and round-trips whole.
func TestLargeSampleRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.gdrec")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("/var/log/nccl/rank.%h.%p.log ", 3*smallPayload/29)
	for i := range 2 {
		if err := w.Write("nccl", time.Unix(int64(i), 0), &sample.NCCL{Files: []sample.NCCLFile{{Path: long}}}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	frames, err := readAll(t, path)
	if err != nil || len(frames) != 2 {
		t.Fatalf("%d frames, %v", len(frames), err)
	}
	for _, fr := range frames {
		var got sample.NCCL
		if err := json.Unmarshal(fr.Sample, &got); err != nil || len(got.Files) != 1 || got.Files[0].Path != long {
			t.Fatalf("large sample did not round-trip: %v", err)
		}
	}
}
