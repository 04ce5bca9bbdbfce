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
//	NCCL version 2.28.9+cuda13.0            (NCCL_DEBUG=VERSION, and NCCL <= 2.4: no prefix)
//
// The timestamp is on by default for WARN only and its format is the user's
// (NCCL_DEBUG_TIMESTAMP_FORMAT), and the launcher or log pipeline adds its
// own text before NCCL's (mpirun's "[1,26]<stdout>:", srun's "0: ", an ISO
// timestamp, CloudWatch's "| 2025-05-16T16:39:51.208-07:00 |", a Markdown
// "> "), sometimes glued to the host name. So the parser looks for the
// host:pid:tid token followed by "[N]" anywhere before "NCCL", not at column
// 0, and takes as the host only what follows the last ':' or '|' and a
// glued timestamp: a host name has neither.
//
// A line whose host:pid:tid was cut away before it was pasted ("[0] NCCL
// INFO ...") is kept with an empty Host and PID 0: NCCL never writes one,
// people who share a log often do.
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

// maxLevelTries bounds the " NCCL " occurrences one line is tried at.
const maxLevelTries = 4

// ParseLine parses one line without its newline. It returns false for
// anything that is not an NCCL debug line: application output interleaved on
// the same stream, partial lines, binary garbage.
func ParseLine(b []byte) (Line, bool) {
	b = bytes.TrimRight(b, "\r\n")
	rest := b
	for try, off := 0, 0; try < maxLevelTries; try++ {
		i := bytes.Index(rest, []byte(" NCCL "))
		if i < 0 {
			break
		}
		if l, ok := parseLevelLine(b, off+i); ok {
			return l, true
		}
		off += i + 1
		rest = b[off:]
	}
	// The bare version line, at column 0 or behind a launcher's prefix.
	if v, ok := bytes.CutPrefix(stripLaunchPrefix(b), []byte("NCCL version ")); ok {
		return Line{Level: LevelVersion, Message: "NCCL version " + clean(v)}, true
	}
	return Line{}, false
}

// parseLevelLine reads the line whose " NCCL " is at at.
func parseLevelLine(b []byte, at int) (Line, bool) {
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
	l.Message = clean(trimMessage(msg, l))
	return l, true
}

// trimMessage drops what a log viewer added after NCCL's text: a table
// border ("... │"), or CloudWatch's second column repeating the whole line
// ("msg | host:pid:tid [0] NCCL INFO msg").
func trimMessage(msg []byte, l Line) []byte {
	if l.Host != "" {
		rep := " | " + l.Host + ":" + strconv.Itoa(l.PID) + ":"
		if i := bytes.Index(msg, []byte(rep)); i >= 0 {
			msg = msg[:i]
		}
	}
	return bytes.TrimRight(msg, " \t\u2502")
}

// parsePrefix finds "host:pid:tid [dev]" among the whitespace-separated
// fields before " NCCL ", else a lone "[dev]" first (the host cut away).
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
	// "[dev]", then for WARN "file.cc:123" and "(func)": no more.
	fields = bytes.Fields(stripLaunchPrefix(p))
	if len(fields) == 0 || len(fields) > 3 {
		return Line{}, false
	}
	dev, ok := bracketInt(fields[0])
	if !ok {
		return Line{}, false
	}
	return Line{CudaDev: dev}, true
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
	host := hostOf(f[:i])
	// A hostname as NCCL prints it: no spaces (the field split ensures it),
	// printable ASCII or UTF-8, bounded like HOST_NAME_MAX.
	if len(host) == 0 || len(host) > 255 || !utf8.Valid(host) {
		return "", 0, 0, false
	}
	for _, c := range host {
		if c < 0x20 || c == 0x7f {
			return "", 0, 0, false
		}
	}
	return string(host), pid, tid, true
}

// hostOf is the host name in the text before ":pid:tid": what follows a
// timestamp glued to it and the last ':' or '|' of a launcher's prefix
// ("[1,26]<stdout>:host", "0:host", "2025-05-16T16:39:51.208-07:00host").
func hostOf(f []byte) []byte {
	if n := timestampLen(f); n > 0 {
		f = f[n:]
	}
	if i := bytes.LastIndexAny(f, ":|"); i >= 0 {
		f = f[i+1:]
	}
	return f
}

// stripLaunchPrefix removes what launchers and log pipelines put before
// NCCL's own text: whitespace, '|', '│' and '>' (CloudWatch and k9s
// columns, Markdown quotes), mpirun's "[1,26]<stdout>:", srun's "12: ", ISO
// timestamps, bracketed timestamps. A bracketed number alone ("[0]") is
// NCCL's device and stays.
func stripLaunchPrefix(b []byte) []byte {
	for n := 0; n < 16; n++ {
		b = bytes.TrimLeft(b, " \t")
		switch {
		case len(b) == 0:
			return b
		case b[0] == '|' || b[0] == '>':
			b = b[1:]
		case bytes.HasPrefix(b, []byte("\u2502")):
			b = b[len("\u2502"):]
		case b[0] == '[':
			end := bytes.IndexByte(b, ']')
			if end < 0 {
				return b
			}
			inner, after := b[1:end], b[end+1:]
			switch {
			case bytes.HasPrefix(after, []byte("<stdout>:")) || bytes.HasPrefix(after, []byte("<stderr>:")):
				b = after[len("<stdout>:"):]
			case timestampLen(inner) > 0:
				b = after
			default:
				return b
			}
		case timestampLen(b) > 0:
			b = b[timestampLen(b):]
		case b[0] >= '0' && b[0] <= '9':
			i := 0
			for i < len(b) && i < 8 && b[i] >= '0' && b[i] <= '9' {
				i++
			}
			if i == len(b) || b[i] != ':' {
				return b
			}
			b = b[i+1:]
		default:
			return b
		}
	}
	return b
}

// timestampLen is the length of an ISO 8601 date and time at the start of
// b ("2025-05-16", "2025-05-16T16:39:51.208-07:00", "2019-02-11 09:47:49,051",
// "2024-12-04T05:27:48.125Z"), 0 when b starts with none.
func timestampLen(b []byte) int {
	digits := func(i, n int) bool {
		if i+n > len(b) {
			return false
		}
		for _, c := range b[i : i+n] {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	if !digits(0, 4) || len(b) < 10 || b[4] != '-' || !digits(5, 2) || b[7] != '-' || !digits(8, 2) {
		return 0
	}
	i := 10
	if i+6 <= len(b) && (b[i] == 'T' || b[i] == ' ') && digits(i+1, 2) && b[i+3] == ':' && digits(i+4, 2) {
		i += 6
		if i+3 <= len(b) && b[i] == ':' && digits(i+1, 2) {
			i += 3
			if i+1 < len(b) && (b[i] == '.' || b[i] == ',') && digits(i+1, 1) {
				i++
				for i < len(b) && b[i] >= '0' && b[i] <= '9' {
					i++
				}
			}
		}
		switch {
		case i < len(b) && b[i] == 'Z':
			i++
		case i+3 <= len(b) && (b[i] == '+' || b[i] == '-') && digits(i+1, 2):
			i += 3
			if i+3 <= len(b) && b[i] == ':' && digits(i+1, 2) {
				i += 3
			} else if digits(i, 2) {
				i += 2
			}
		}
	}
	return i
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
