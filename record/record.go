// Package record writes and reads the sample stream: every successful sample
// of every collector, in order, so a whole daemon (metrics, /diagnose) can be
// driven from a file later, at real or faster speed.
//
// Format, version 1:
//
//	file   = magic frame*
//	magic  = "GPUDIAG-RECORD-1\n"                       (17 bytes)
//	frame  = length:uint32le crc:uint32le payload       (payload is length bytes)
//	payload = DEFLATE(JSON{"c": collector, "t": unix nanoseconds, "s": sample})
//
// crc is CRC-32C (Castagnoli) of the compressed payload. Frames are written
// whole and only appended, so a crash mid-write leaves at most one torn frame
// at the end: the reader reports it with its offset, and a writer reopening
// the file cuts it off before appending.
package record

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"
)

// Magic starts every record file; its last digit is the format version.
const Magic = "GPUDIAG-RECORD-1\n"

// MaxPayload bounds one frame's sample as written (JSON, uncompressed),
// and so what a reader inflates one frame to: a small corrupt or hostile
// trace cannot make a reader allocate much more than this (a deflate bomb
// of 1 MiB would otherwise inflate to hundreds). The daemon's own window
// holds 16 MiB of samples by default, so no real sample comes near.
const MaxPayload = 32 << 20

// MaxFrame bounds one frame as stored (compressed). Compression never
// grows a payload by more than a few bytes per 64 KiB block, so a frame of
// a payload within MaxPayload fits.
const MaxFrame = MaxPayload + MaxPayload/1024 + 64

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrTruncated marks a frame cut short at the end of the file (a crash while
// writing, or a file still being written).
var ErrTruncated = errors.New("truncated frame")

// Frame is one recorded sample, still encoded.
type Frame struct {
	Collector string          `json:"c"`
	UnixNano  int64           `json:"t"`
	Sample    json.RawMessage `json:"s"`
}

// Time is the frame's sample time.
func (f Frame) Time() time.Time { return time.Unix(0, f.UnixNano) }

// file is what a Writer needs of its *os.File; tests stand in a full disk.
type file interface {
	WriteAt(b []byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// Writer appends frames to a record file.
type Writer struct {
	f   file
	buf bytes.Buffer
	zw  *flate.Writer
	// off is the end of the last whole frame: after a failed write (disk
	// full) the file is cut back to it, so the record stays readable and
	// later frames can follow when space comes back.
	off int64
	// torn is set while bytes of a failed write may lie past off because
	// cutting them back failed too; the next Write cuts them first.
	torn bool
	// Bytes and Frames count what was written, for the daemon's self-metrics.
	Bytes  int64
	Frames int64
	// TornBytes is how much of a torn tail Create cut off an existing
	// file (a crash mid-write), so the caller can say so.
	TornBytes int64
}

// Create opens path for appending, creating it with the magic when new. An
// existing file must be a record of this version; a torn frame at its end
// (from a crash) is cut off so new frames follow the last whole one.
//
// A trace holds what the daemon read of other users' processes (their
// allow-listed NCCL settings, NCCL log lines), so it is readable by its
// owner only: created 0600, and an existing file open to others is made
// private before anything is appended.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		if err := f.Chmod(perm &^ 0o077); err != nil {
			f.Close()
			return nil, fmt.Errorf("record %s is readable by others (mode %04o) and cannot be made private: %w", path, perm, err)
		}
	}
	if st.Size() == 0 {
		if _, err := f.Write([]byte(Magic)); err != nil {
			f.Close()
			os.Remove(path) // a cut magic would make the next start refuse the file
			return nil, fmt.Errorf("record %s: %w", path, err)
		}
		return newWriter(f, int64(len(Magic))), nil
	}
	end, err := lastGoodOffset(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("record %s: %w", path, err)
	}
	if end < st.Size() {
		if err := f.Truncate(end); err != nil {
			f.Close()
			return nil, fmt.Errorf("record %s: cutting a torn frame at offset %d: %w", path, end, err)
		}
	}
	w := newWriter(f, end)
	w.TornBytes = st.Size() - end
	return w, nil
}

// newWriter appends to f from off, the end of its last whole frame.
func newWriter(f file, off int64) *Writer {
	zw, _ := flate.NewWriter(nil, flate.BestSpeed)
	return &Writer{f: f, zw: zw, off: off}
}

// lastGoodOffset reads the file and returns the offset just past its last
// whole frame.
func lastGoodOffset(f *os.File) (int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	r, err := NewReader(f)
	if err != nil {
		return 0, err
	}
	for {
		if _, err := r.Next(); err != nil {
			if err == io.EOF || errors.Is(err, ErrTruncated) {
				return r.Offset(), nil
			}
			return 0, err
		}
	}
}

// Write appends one sample. The frame is built in memory and written with one
// write call, so a crash leaves either the whole frame or a torn tail.
func (w *Writer) Write(collector string, t time.Time, s any) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding %s sample: %w", collector, err)
	}
	payload, err := json.Marshal(Frame{Collector: collector, UnixNano: t.UnixNano(), Sample: raw})
	if err != nil {
		return err
	}
	if len(payload) > MaxPayload {
		return fmt.Errorf("%s sample is %d bytes, over the %d-byte frame limit", collector, len(payload), MaxPayload)
	}
	w.buf.Reset()
	w.buf.Write(make([]byte, 8)) // header, filled below
	w.zw.Reset(&w.buf)
	if _, err := w.zw.Write(payload); err != nil {
		return err
	}
	if err := w.zw.Close(); err != nil {
		return err
	}
	b := w.buf.Bytes()
	body := b[8:]
	if len(body) > MaxFrame {
		return fmt.Errorf("%s sample is %d bytes compressed, over the %d-byte frame limit", collector, len(body), MaxFrame)
	}
	binary.LittleEndian.PutUint32(b[0:4], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(body, castagnoli))
	if w.torn {
		if err := w.f.Truncate(w.off); err != nil {
			return fmt.Errorf("cutting a torn %s frame back to offset %d: %w", collector, w.off, err)
		}
		w.torn = false
	}
	// WriteAt the end of the last whole frame, not at the file offset: what
	// a failed write left is overwritten or cut, never appended to.
	if _, err := w.f.WriteAt(b, w.off); err != nil {
		// Cut the torn tail now so the file stays a valid record even if
		// no write follows.
		w.torn = w.f.Truncate(w.off) != nil
		return fmt.Errorf("writing %s frame at offset %d: %w", collector, w.off, err)
	}
	w.off += int64(len(b))
	w.Bytes += int64(len(b))
	w.Frames++
	return nil
}

// Sync flushes the file to disk.
func (w *Writer) Sync() error { return w.f.Sync() }

// Close syncs and closes the file.
func (w *Writer) Close() error {
	serr := w.f.Sync()
	if err := w.f.Close(); err != nil {
		return err
	}
	return serr
}

// Reader reads frames in order.
type Reader struct {
	r       *bufio.Reader
	offset  int64
	zr      io.ReadCloser
	body    bytes.Buffer // the frame being read, reused
	payload bytes.Buffer // its sample, inflated, reused
}

// NewReader checks the magic and returns a reader positioned at the first
// frame.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic := make([]byte, len(Magic))
	if _, err := io.ReadFull(br, magic); err != nil {
		return nil, fmt.Errorf("not a gpudiag record: %w", err)
	}
	if string(magic) != Magic {
		if bytes.HasPrefix(magic, []byte("GPUDIAG-RECORD-")) {
			return nil, fmt.Errorf("record format %q is not supported by this version (want %q)", bytes.TrimSpace(magic), bytes.TrimSpace([]byte(Magic)))
		}
		return nil, errors.New("not a gpudiag record (bad magic)")
	}
	return &Reader{r: br, offset: int64(len(Magic)), zr: flate.NewReader(nil)}, nil
}

// Offset is the byte offset of the next frame.
func (r *Reader) Offset() int64 { return r.offset }

// Next returns the next frame, io.EOF at a clean end, or an error naming the
// offset of the frame that is torn (ErrTruncated) or corrupt.
func (r *Reader) Next() (Frame, error) {
	var hdr [8]byte
	n, err := io.ReadFull(r.r, hdr[:])
	switch {
	case err == io.EOF:
		return Frame{}, io.EOF
	case err != nil:
		return Frame{}, fmt.Errorf("frame at offset %d: header cut after %d of 8 bytes: %w", r.offset, n, ErrTruncated)
	}
	size := binary.LittleEndian.Uint32(hdr[0:4])
	sum := binary.LittleEndian.Uint32(hdr[4:8])
	if size == 0 || size > MaxFrame {
		return Frame{}, fmt.Errorf("frame at offset %d: corrupt length %d", r.offset, size)
	}
	// Read as the bytes arrive rather than allocating the header's size
	// first: a torn or corrupt header costs only the bytes that are there.
	r.body.Reset()
	if n, err := r.body.ReadFrom(io.LimitReader(r.r, int64(size))); err != nil || n != int64(size) {
		return Frame{}, fmt.Errorf("frame at offset %d: %d of %d bytes: %w", r.offset, n, size, ErrTruncated)
	}
	body := r.body.Bytes()
	if crc32.Checksum(body, castagnoli) != sum {
		return Frame{}, fmt.Errorf("frame at offset %d: checksum mismatch (corrupt data)", r.offset)
	}
	payload, err := r.inflate(body)
	if err != nil {
		return Frame{}, fmt.Errorf("frame at offset %d: %v", r.offset, err)
	}
	var f Frame
	if err := json.Unmarshal(payload, &f); err != nil {
		return Frame{}, fmt.Errorf("frame at offset %d: %v", r.offset, err)
	}
	if f.Collector == "" {
		return Frame{}, fmt.Errorf("frame at offset %d: no collector name", r.offset)
	}
	r.offset += 8 + int64(size)
	return f, nil
}

// smallPayload is what a frame is inflated to directly; nearly every sample
// is far smaller.
const smallPayload = 1 << 20

// inflate returns a frame body's sample, inflated into a reused buffer
// (json.Unmarshal copies the sample out of it: json.RawMessage keeps a
// copy). A payload past smallPayload is first measured without being kept,
// then inflated again into a buffer of exactly its size: a deflate bomb is
// refused after a megabyte, not after growing a buffer to the limit. A
// payload past MaxPayload is returned as MaxPayload+1 bytes' worth of
// length only, for the caller to refuse.
func (r *Reader) inflate(body []byte) ([]byte, error) {
	reset := func() error { return r.zr.(flate.Resetter).Reset(bytes.NewReader(body), nil) }
	if err := reset(); err != nil {
		return nil, err
	}
	r.payload.Reset()
	n, err := r.payload.ReadFrom(io.LimitReader(r.zr, smallPayload+1))
	if err != nil || n <= smallPayload {
		return r.payload.Bytes(), err
	}
	rest, err := io.Copy(io.Discard, io.LimitReader(r.zr, MaxPayload+1-n))
	if err != nil {
		return nil, err
	}
	if n+rest > MaxPayload {
		return nil, fmt.Errorf("inflates past the %d-byte limit of a sample (corrupt or hostile)", MaxPayload)
	}
	if err := reset(); err != nil {
		return nil, err
	}
	r.payload.Reset()
	r.payload.Grow(int(n + rest))
	_, err = r.payload.ReadFrom(r.zr)
	return r.payload.Bytes(), err
}
