package nccl

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Level is the severity NCCL printed after "NCCL".
type Level uint8

const (
	LevelUnknown Level = iota
	// LevelVersion is the bare "NCCL version X" line NCCL prints at
	// NCCL_DEBUG=VERSION or WARN: it has no host:pid:tid prefix.
	LevelVersion
	LevelInfo
	LevelWarn
	LevelTrace
	LevelCall
	LevelAbort
)

func (l Level) String() string {
	switch l {
	case LevelVersion:
		return "VERSION"
	case LevelInfo:
		return "INFO"
	case LevelWarn:
		return "WARN"
	case LevelTrace:
		return "TRACE"
	case LevelCall:
		return "CALL"
	case LevelAbort:
		return "ABORT"
	}
	return "UNKNOWN"
}

var levelWords = map[string]Level{
	"INFO": LevelInfo, "WARN": LevelWarn, "TRACE": LevelTrace, "CALL": LevelCall, "ABORT": LevelAbort,
}

// MaxMessageBytes caps the message kept from one line. NCCL itself formats
// into a 1024-byte buffer before expanding the arguments; anything longer is
// an argument run wild or not NCCL at all.
const MaxMessageBytes = 4096

// Line is one NCCL_DEBUG line, as NCCL's debug.cc formats it:
//
//	[timestamp ]host:pid:tid [cudaDev] NCCL INFO message
//	[timestamp ]host:pid:tid [cudaDev] file.cc:123 (func) NCCL WARN message
//	host:pid:tid [cudaDev] 12.345 func:123 NCCL TRACE message
//	NCCL version 2.28.9+cuda13.0            (NCCL_DEBUG=VERSION: no prefix)
//
// The timestamp is on by default for WARN only and its format is the user's
// (NCCL_DEBUG_TIMESTAMP_FORMAT), so the parser looks for the host:pid:tid
// token followed by "[N]" anywhere before "NCCL", not at column 0.
type Line struct {
	Host string
	PID  int
	TID  int
	// CudaDev is cudaGetDevice() of the logging thread. NCCL's proxy threads
	// report device 0 whatever GPU they serve, so only the init lines' busId
	// ties a process to a GPU.
	CudaDev int
	Level   Level
	Message string
}

// ParseLine parses one line without its newline. It returns false for
// anything that is not an NCCL debug line: application output interleaved on
// the same stream, partial lines, binary garbage.
func ParseLine(b []byte) (Line, bool) {
	b = bytes.TrimRight(b, "\r\n")
	if rest, ok := bytes.CutPrefix(b, []byte("NCCL version ")); ok {
		return Line{Level: LevelVersion, Message: "NCCL version " + clean(rest)}, true
	}
	at := bytes.Index(b, []byte(" NCCL "))
	if at < 0 {
		return Line{}, false
	}
	after := b[at+len(" NCCL "):]
	sp := bytes.IndexByte(after, ' ')
	word := after
	msg := []byte(nil)
	if sp >= 0 {
		word, msg = after[:sp], after[sp+1:]
	}
	level, ok := levelWords[string(word)]
	if !ok {
		return Line{}, false
	}
	l, ok := parsePrefix(b[:at])
	if !ok {
		return Line{}, false
	}
	l.Level = level
	l.Message = clean(msg)
	return l, true
}

// parsePrefix finds "host:pid:tid [dev]" among the whitespace-separated
// fields before " NCCL ".
func parsePrefix(p []byte) (Line, bool) {
	fields := bytes.Fields(p)
	for i := 0; i+1 < len(fields); i++ {
		host, pid, tid, ok := splitHostPIDTID(fields[i])
		if !ok {
			continue
		}
		dev, ok := bracketInt(fields[i+1])
		if !ok {
			continue
		}
		return Line{Host: host, PID: pid, TID: tid, CudaDev: dev}, true
	}
	return Line{}, false
}

func splitHostPIDTID(f []byte) (string, int, int, bool) {
	j := bytes.LastIndexByte(f, ':')
	if j <= 0 {
		return "", 0, 0, false
	}
	i := bytes.LastIndexByte(f[:j], ':')
	if i <= 0 {
		return "", 0, 0, false
	}
	pid, ok1 := atoiPositive(f[i+1 : j])
	tid, ok2 := atoiPositive(f[j+1:])
	if !ok1 || !ok2 || pid == 0 {
		return "", 0, 0, false
	}
	host := f[:i]
	// A hostname as NCCL prints it: no spaces (the field split ensures it),
	// printable ASCII or UTF-8, bounded like HOST_NAME_MAX.
	if len(host) > 255 || !utf8.Valid(host) {
		return "", 0, 0, false
	}
	for _, c := range host {
		if c < 0x20 || c == 0x7f {
			return "", 0, 0, false
		}
	}
	return string(host), pid, tid, true
}

func bracketInt(f []byte) (int, bool) {
	if len(f) < 3 || f[0] != '[' || f[len(f)-1] != ']' {
		return 0, false
	}
	return atoiPositive(f[1 : len(f)-1])
}

// atoiPositive parses a non-negative decimal that fits in an int32 (pids,
// tids, device and rank numbers all do).
func atoiPositive(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > 1<<31-1 {
		return 0, false
	}
	return n, true
}

// clean bounds a message and makes it valid UTF-8, so that what reaches a
// label value or a JSON record is always well formed.
func clean(b []byte) string {
	if len(b) > MaxMessageBytes {
		b = b[:MaxMessageBytes]
	}
	b = bytes.TrimSpace(b)
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// ParseBusID turns NCCL's int64 bus ID, printed in hex ("busId 1b000",
// "busId 60"), into the kernel's form "0000:1b:00.0". NCCL builds the number
// from the hex digits of "dddd:bb:dd.f", so the digits read back from the
// right: function (1), device (2), bus (2), domain (the rest).
func ParseBusID(hex string) (string, bool) {
	hex = strings.TrimPrefix(strings.ToLower(hex), "0x")
	if hex == "" || len(hex) > 16 {
		return "", false
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return "", false
	}
	fn := v & 0xf
	dev := (v >> 4) & 0xff
	bus := (v >> 12) & 0xff
	domain := v >> 20
	if dev > 0x1f || fn > 7 || domain > 0xffffffff {
		return "", false
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, fn), true
}
