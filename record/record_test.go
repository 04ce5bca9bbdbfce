package record

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
