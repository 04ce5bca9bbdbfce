package nccl

import (
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Line
		ok   bool
	}{
		{"info from the fixture", "vm:586:586 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
			Line{Host: "vm", PID: 586, TID: 586, CudaDev: 0, Level: LevelInfo, Message: "NCCL version 2.28.9+cuda13.0"}, true},
		{"proxy thread with indented topology text", "vm:587:587 [1] NCCL INFO                 + NET[1.2] - NET/0-0 (0/0/0/1.250000)",
			Line{Host: "vm", PID: 587, TID: 587, CudaDev: 1, Level: LevelInfo, Message: "+ NET[1.2] - NET/0-0 (0/0/0/1.250000)"}, true},
		{"warn with default timestamp, file, line and function",
			"[2026-11-21 10:11:12] node-7:4242:4301 [3] transport/net_ib.cc:1234 (ncclIbConnect) NCCL WARN NET/IB : Got completion with error 12",
			Line{Host: "node-7", PID: 4242, TID: 4301, CudaDev: 3, Level: LevelWarn, Message: "NET/IB : Got completion with error 12"}, true},
		{"warn from a net plugin (file, no function)", "gpu1:77:78 [0] net_plugin.cc:55 NCCL WARN bad thing",
			Line{Host: "gpu1", PID: 77, TID: 78, Level: LevelWarn, Message: "bad thing"}, true},
		{"trace", "h:1:2 [5] 12.345678 ncclProxyProgress:101 NCCL TRACE progress",
			Line{Host: "h", PID: 1, TID: 2, CudaDev: 5, Level: LevelTrace, Message: "progress"}, true},
		{"custom timestamp with a colon-separated time before the prefix", "12:00:01 h:10:11 [0] NCCL INFO x",
			Line{Host: "h", PID: 10, TID: 11, Level: LevelInfo, Message: "x"}, true},
		{"CRLF", "h:10:11 [0] NCCL INFO Using network IB\r",
			Line{Host: "h", PID: 10, TID: 11, Level: LevelInfo, Message: "Using network IB"}, true},
		{"bare version (NCCL_DEBUG=VERSION)", "NCCL version 2.21.5+cuda12.4",
			Line{Level: LevelVersion, Message: "NCCL version 2.21.5+cuda12.4"}, true},
		{"level without message", "h:10:11 [0] NCCL INFO",
			Line{Host: "h", PID: 10, TID: 11, Level: LevelInfo}, true},
		{"invalid UTF-8 in the message is replaced", "h:10:11 [0] NCCL WARN bad \xff byte",
			Line{Host: "h", PID: 10, TID: 11, Level: LevelWarn, Message: "bad \uFFFD byte"}, true},

		{"application output", "RESULT backend=nccl iters=72 algbw_GBps=3.0 busbw_GBps=3.0", Line{}, false},
		{"mentions NCCL but has no prefix", "torch: NCCL INFO is verbose", Line{}, false},
		{"unknown level", "h:10:11 [0] NCCL DEBUG x", Line{}, false},
		{"pid zero", "h:0:11 [0] NCCL INFO x", Line{}, false},
		{"pid not a number", "h:x:11 [0] NCCL INFO x", Line{}, false},
		{"no device bracket", "h:10:11 NCCL INFO x", Line{}, false},
		{"device not a number", "h:10:11 [a] NCCL INFO x", Line{}, false},
		{"partial line cut inside the prefix", "vm:586:5", Line{}, false},
		{"partial line cut inside the level", "vm:586:586 [0] NCCL IN", Line{}, false},
		{"pid overflowing int32", "h:99999999999:1 [0] NCCL INFO x", Line{}, false},
		{"control byte in host", "h\x01:10:11 [0] NCCL INFO x", Line{}, false},
		{"NUL run from a copytruncate hole", "\x00\x00\x00\x00", Line{}, false},
		{"empty", "", Line{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseLine([]byte(tc.in))
			if ok != tc.ok || got != tc.want {
				t.Fatalf("ParseLine(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseLineBoundsMessage(t *testing.T) {
	got, ok := ParseLine([]byte("h:1:1 [0] NCCL WARN " + strings.Repeat("x", 3*MaxMessageBytes)))
	if !ok || len(got.Message) != MaxMessageBytes {
		t.Fatalf("message of %d bytes kept (ok=%v); want %d", len(got.Message), ok, MaxMessageBytes)
	}
}

func TestParseBusID(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"60", "0000:00:06.0", true}, // the fixtures' VM: 0000:00:06.0
		{"70", "0000:00:07.0", true},
		{"1b000", "0000:1b:00.0", true}, // a DGX H100's first GPU
		{"db000", "0000:db:00.0", true},
		{"0x9a000", "0000:9a:00.0", true},
		{"100041000", "1000:41:00.0", true}, // VMD domain
		{"1b0f8", "", false},                // function 8 does not exist
		{"", "", false},
		{"zz", "", false},
		{"12345678901234567", "", false},
	} {
		got, ok := ParseBusID(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseBusID(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
