package hostfs

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

const procNetDevHeader = "Inter-|   Receive                                                |  Transmit\n" +
	" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"

func TestParseProcNetDev(t *testing.T) {
	eth0 := NetCounters{ReceiveBytes: 874354587, ReceivePackets: 1036395, ReceiveErrors: 1, ReceiveDrops: 2,
		TransmitBytes: 563352563, TransmitPackets: 732147, TransmitErrors: 3, TransmitDrops: 4}
	for _, tc := range []struct {
		name, text string
		want       map[string]NetCounters
		errHas     string
	}{
		{name: "procfs's fixture line", text: procNetDevHeader +
			"  eth0: 874354587 1036395    1    2    0     0          0         0 563352563  732147    3    4    0     0       0          0\n",
			want: map[string]NetCounters{"eth0": eth0}},
		{name: "2.4, no space after the colon", text: procNetDevHeader +
			"  eth0:874354587 1036395    1    2    0     0          0         0 563352563  732147    3    4    0     0       0          0\n",
			want: map[string]NetCounters{"eth0": eth0}},
		{name: "no interfaces", text: procNetDevHeader, want: map[string]NetCounters{}},
		{name: "no header", text: "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", errHas: "not the header"},
		{name: "empty", text: "", errHas: "no header"},
		{name: "cut short", text: procNetDevHeader + "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n", errHas: "counter 16"},
		{name: "too many", text: procNetDevHeader + "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n", errHas: "more than 16"},
		{name: "negative", text: procNetDevHeader + "  eth0: -1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", errHas: "counter 1"},
		{name: "no name", text: procNetDevHeader + "  : 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", errHas: "want \"name: counters\""},
		{name: "twice", text: procNetDevHeader + "eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\neth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
			errHas: "listed again"},
	} {
		got, err := ParseProcNetDev("/proc/net/dev", []byte(tc.text))
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.HasPrefix(err.Error(), "/proc/net/dev: ") {
				t.Errorf("%s: error %v; want one naming the file and %q", tc.name, err, tc.errHas)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// More interfaces than ProcNetDevMaxInterfaces fail the read rather than
// growing a map without bound.
func TestParseProcNetDevBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(procNetDevHeader)
	for i := range ProcNetDevMaxInterfaces + 1 {
		fmt.Fprintf(&b, "veth%d: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", i)
	}
	if _, err := ParseProcNetDev("dev", []byte(b.String())); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("error %v", err)
	}
}

// The host's /proc/net/dev is PID 1's, in the host's network namespace,
// where <proc>/1/net/dev is there; the reference tree and the upstream
// fixture trees have only <proc>/net/dev.
func TestProcNetDevPrefersPID1(t *testing.T) {
	host, err := NewFS(filepath.Join("..", hosttest.HostTree, "proc"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	devs, err := host.ProcNetDev()
	if err != nil || !slices.Equal(slices.Sorted(maps.Keys(devs)), []string{"ens9c0np0", "eth0", "ibp26s0", "lo", "veth1234"}) ||
		devs["ens9c0np0"].ReceiveBytes != 912345678 {
		t.Fatalf("reference tree: %+v, %v", devs, err)
	}
	proc := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(proc, "net/dev"), procNetDevHeader+"pod0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n")
	hosttest.WriteFile(t, filepath.Join(proc, "1/net/dev"), procNetDevHeader+"eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n")
	if host, err = NewFS(proc, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if devs, err = host.ProcNetDev(); err != nil || len(devs) != 1 || devs["eth0"].TransmitBytes != 9 {
		t.Fatalf("with PID 1's: %+v, %v; want its eth0, not the reader's pod0", devs, err)
	}
}

// FuzzParseProcNetDev: any input gives counters per interface or an error
// naming the file, never a panic; what was read renders as a file that
// reads the same.
func FuzzParseProcNetDev(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/net/dev"))
	f.Add([]byte(procNetDevHeader + "eth0:1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"))
	f.Add([]byte(procNetDevHeader + "eth0: 18446744073709551615 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16"))
	f.Add([]byte("|\n|\na:b: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var devs map[string]NetCounters
		var err error
		hosttest.WithinHangLimit(t, func() { devs, err = ParseProcNetDev("dev", data) })
		if err != nil {
			hosttest.CheckError(t, err, "dev: ")
			return
		}
		var b bytes.Buffer
		b.WriteString(procNetDevHeader)
		for _, name := range slices.Sorted(maps.Keys(devs)) {
			d := devs[name]
			if d.CarrierChanges != 0 {
				t.Fatalf("%s: carrier changes %d, which the file has not", name, d.CarrierChanges)
			}
			fmt.Fprintf(&b, "%s: %d %d %d %d 0 0 0 0 %d %d %d %d 0 0 0 0\n", name, d.ReceiveBytes, d.ReceivePackets, d.ReceiveErrors,
				d.ReceiveDrops, d.TransmitBytes, d.TransmitPackets, d.TransmitErrors, d.TransmitDrops)
		}
		if again, err := ParseProcNetDev("dev", b.Bytes()); err != nil || !maps.Equal(again, devs) {
			t.Fatalf("%+v rendered reads back as %+v, %v", devs, again, err)
		}
	})
}
