package collectors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"github.com/prometheus/procfs/blockdevice"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

// renderDiskstats prints devices as /proc/diskstats does, with as many
// fields as each was read with.
func renderDiskstats(devs []blockdevice.Diskstats) []byte {
	var b bytes.Buffer
	for _, d := range devs {
		v := []uint64{d.ReadIOs, d.ReadMerges, d.ReadSectors, d.ReadTicks, d.WriteIOs, d.WriteMerges, d.WriteSectors, d.WriteTicks,
			d.IOsInProgress, d.IOsTotalTicks, d.WeightedIOTicks, d.DiscardIOs, d.DiscardMerges, d.DiscardSectors, d.DiscardTicks,
			d.FlushRequestsCompleted, d.TimeSpentFlushing}
		fmt.Fprintf(&b, "%4d %7d %s", d.MajorNumber, d.MinorNumber, d.DeviceName)
		for _, x := range v[:d.IoStatsCount-3] {
			fmt.Fprintf(&b, " %d", x)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func FuzzParseDiskstats(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/diskstats"))
	f.Add([]byte(" 259 0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11\n 8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19\n"))
	f.Add([]byte(" 252 0 vda 40000 5000 5120000\n"))
	// The same device twice, and the same numbers under two names.
	f.Add([]byte(" 259 0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11\n 259 0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11\n"))
	f.Add([]byte(" 259 0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11\n 259 0 nvme1n1 1 2 3 4 5 6 7 8 9 10 11\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var devs []blockdevice.Diskstats
		var err error
		hosttest.WithinHangLimit(t, func() { devs, err = hostfs.ParseDiskstats("diskstats", data) })
		if err != nil {
			hosttest.CheckError(t, err, "diskstats: line ")
			return
		}
		if lines := bytes.Count(data, []byte("\n")) + 1; len(devs) > lines || len(devs) > hostfs.DiskstatsMaxDevices {
			t.Fatalf("%d devices from %d lines; at most %d", len(devs), lines, hostfs.DiskstatsMaxDevices)
		}
		out := &sample.Disks{}
		names := map[string]bool{}
		for _, d := range devs {
			// A device listed twice would be two series of one name.
			if names[d.DeviceName] {
				t.Fatalf("device %q read twice", d.DeviceName)
			}
			names[d.DeviceName] = true
			if d.IoStatsCount < hostfs.DiskstatsMinFields || d.IoStatsCount > hostfs.DiskstatsMaxFields ||
				!utf8.ValidString(d.DeviceName) || strings.ContainsAny(d.DeviceName, "/ \n") || d.DeviceName == "" {
				t.Fatalf("device %+v", d)
			}
			c := diskCounters(&d)
			if c.ReadBytes/procfs.SectorSize != d.ReadSectors || c.WrittenBytes/procfs.SectorSize != d.WriteSectors ||
				c.DiscardedBytes/procfs.SectorSize != d.DiscardSectors && c.HasDiscards {
				t.Fatalf("byte counts %+v overflow the sector counts of %+v", c, d)
			}
			out.Devices = append(out.Devices, sample.Disk{Name: d.DeviceName, Major: d.MajorNumber, Minor: d.MinorNumber,
				Counters: c, InFlight: d.IOsInProgress, NUMANode: -1})
		}
		if again, err := hostfs.ParseDiskstats("diskstats", renderDiskstats(devs)); err != nil || !reflect.DeepEqual(again, devs) {
			t.Fatalf("%+v rendered reads back as %+v, %v", devs, again, err)
		}
		// Every device makes valid series: label values are UTF-8.
		(&diskstatsCollector{}).Metrics(out, func(prometheus.Metric) {})
	})
}

// FuzzPressure feeds two readings of /proc/pressure/cpu, a second apart,
// through the collector: either an error naming the file, or averages and
// ratios within 0-1 in a sample that can be recorded as JSON.
func FuzzPressure(f *testing.F) {
	for _, res := range pressureResources {
		f.Add(hosttest.Seed(f, "proc/pressure/"+res), hosttest.Seed(f, "proc/pressure/"+res))
	}
	f.Add([]byte("some avg10=1.00 avg60=1.00 avg300=1.00 total=5000000\n"), []byte("some avg10=1.00 avg60=1.00 avg300=1.00 total=3000000\n"))
	f.Add([]byte("full avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"), []byte("full avg10=100.00 avg60=0.00 avg300=0.00 total=9000000\n"))
	f.Add([]byte("some avg10=nan avg60=0.00 avg300=0.00 total=1\n"), []byte("some avg10=-1 avg60=0.00 avg300=0.00 total=2\n"))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		proc := t.TempDir()
		path := filepath.Join(proc, "pressure", "cpu")
		c, clk := newFuzzPressure(t, proc)
		for i, data := range [][]byte{first, second} {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			clk.t = clk.t.Add(time.Second)
			var raw any
			var err error
			hosttest.WithinHangLimit(t, func() { raw, err = c.Sample(context.Background()) })
			if err != nil {
				hosttest.CheckError(t, err, path+": ")
				continue
			}
			s := raw.(*sample.Pressure)
			if len(s.Resources) != 1 || s.Resources[0].Resource != "cpu" || s.Resources[0].Some == nil && s.Resources[0].Full == nil {
				t.Fatalf("reading %d: %+v", i, s)
			}
			for _, l := range []*sample.PressureLine{s.Resources[0].Some, s.Resources[0].Full} {
				if l != nil && !(l.Avg10 >= 0 && l.Avg10 <= 1 && l.IntervalRatio >= 0 && l.IntervalRatio <= 1) {
					t.Fatalf("reading %d: line %+v", i, l)
				}
			}
			if _, err := json.Marshal(s); err != nil {
				t.Fatalf("reading %d: %+v cannot be recorded: %v", i, s, err)
			}
		}
	})
}

func newFuzzPressure(t *testing.T, proc string) (*pressureCollector, *fakeClock) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(proc, "pressure"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := newPressureCollector(Config{ProcPath: proc, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	return c, clk
}
