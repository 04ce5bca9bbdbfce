package hostfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

func writeLinkAttrs(t *testing.T, dir string, attrs map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range attrs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadPCIeLink(t *testing.T) {
	for _, tc := range []struct {
		name        string
		attrs       map[string]string
		ok, trained bool
		bytesPerSec float64
	}{
		{name: "Gen5 x16 at full rate", ok: true, bytesPerSec: 32 * 16 * 1e9 / 8 * 128 / 130,
			attrs: map[string]string{"current_link_speed": "32.0 GT/s PCIe", "max_link_speed": "32.0 GT/s PCIe", "current_link_width": "16", "max_link_width": "16"}},
		{name: "Gen4 card in a Gen3 slot", ok: true, trained: true, bytesPerSec: 8 * 16 * 1e9 / 8 * 128 / 130,
			attrs: map[string]string{"current_link_speed": "8.0 GT/s PCIe", "max_link_speed": "16.0 GT/s PCIe", "current_link_width": "16", "max_link_width": "16"}},
		{name: "old kernel's format, lanes lost", ok: true, trained: true, bytesPerSec: 5 * 4 * 1e9 / 8 * 0.8,
			attrs: map[string]string{"current_link_speed": "5 GT/s", "max_link_speed": "5 GT/s", "current_link_width": "4", "max_link_width": "8"}},
		{name: "link down", attrs: map[string]string{"current_link_speed": "Unknown", "max_link_speed": "16.0 GT/s PCIe", "current_link_width": "0", "max_link_width": "16"}},
		{name: "no PCIe link files", attrs: map[string]string{"vendor": "0x15b3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "0000:3b:00.0")
			writeLinkAttrs(t, dir, tc.attrs)
			link, ok, err := ReadPCIeLink(dir)
			if err != nil || ok != tc.ok {
				t.Fatalf("ok %v, err %v; want ok %v", ok, err, tc.ok)
			}
			if !ok {
				return
			}
			if link.TrainedDown() != tc.trained {
				t.Errorf("%+v trained down %v; want %v", link, link.TrainedDown(), tc.trained)
			}
			if got := sample.PCIeBytesPerSecond(link.CurrentGTs, link.CurrentWidth); got < tc.bytesPerSec*0.999 || got > tc.bytesPerSec*1.001 {
				t.Errorf("%+v carries %g B/s; want %g", link, got, tc.bytesPerSec)
			}
		})
	}
}

func TestParseInfiniBandRate(t *testing.T) {
	for in, want := range map[string]float64{"400 Gb/sec (4X NDR)": 50e9, "2.5 Gb/sec (1X SDR)": 312.5e6, "100 Gb/sec (4X EDR)\n": 12.5e9} {
		if got, err := ParseInfiniBandRate(in); err != nil || got != want {
			t.Errorf("%q: %g, %v; want %g", in, got, err, want)
		}
	}
	if _, err := ParseInfiniBandRate("fast"); err == nil {
		t.Error("a rate without Gb/sec parsed")
	}
}

// FuzzParseLinkRates: whatever a sysfs speed or rate file holds, a parsed
// value is finite and within the bounds a real link has ("NaN GT/s" was
// a speed before: ParseFloat reads NaN and every comparison with it fails).
func FuzzParseLinkRates(f *testing.F) {
	for _, s := range []string{"16.0 GT/s PCIe", "8 GT/s", "Unknown", "NaN GT/s PCIe", "400 Gb/sec (4X NDR)", "nan Gb/sec", "1e400 Gb/sec", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, ok := ParsePCIeSpeed(s); ok && !(v > 0 && v <= 1024) {
			t.Fatalf("ParsePCIeSpeed(%q) = %v", s, v)
		}
		if v, err := ParseInfiniBandRate(s); err == nil && !(v >= 0 && v <= 1e5*1e9/8) {
			t.Fatalf("ParseInfiniBandRate(%q) = %v", s, v)
		}
	})
}
