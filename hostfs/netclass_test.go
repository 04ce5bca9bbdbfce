package hostfs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// writeNetInterface writes a /sys/class/net/<if> directory whose counters
// are all 7, with the attributes given.
func writeNetInterface(t *testing.T, attrs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, c := range netCounters {
		hosttest.WriteFile(t, filepath.Join(dir, c.file), "7\n")
	}
	for name, v := range attrs {
		hosttest.WriteFile(t, filepath.Join(dir, name), v)
	}
	return dir
}

func TestReadNetInterface(t *testing.T) {
	up := map[string]string{"operstate": "up\n", "carrier": "1\n", "mtu": "9000\n", "speed": "100000\n"}
	got, err := ReadNetInterface(writeNetInterface(t, up))
	if err != nil {
		t.Fatal(err)
	}
	if got.OperState != "up" || !got.Carrier || got.MTUBytes != 9000 || got.SpeedBytesPerSecond != 100e9/8 ||
		got.NUMANode != -1 || got.Counters.ReceiveBytes != 7 || got.Counters.CarrierChanges != 7 {
		t.Errorf("got %+v", got)
	}
	// A link that is down: no carrier or speed to read, and a speed of
	// -1 from drivers that do not know it.
	down, err := ReadNetInterface(writeNetInterface(t, map[string]string{"operstate": "down\n", "speed": "-1\n"}))
	if err != nil || down.OperState != "down" || down.Carrier || down.SpeedBytesPerSecond != 0 || down.MTUBytes != 0 {
		t.Errorf("down: got %+v, %v", down, err)
	}
	// A garbled counter fails the read rather than reading as 0.
	dir := writeNetInterface(t, up)
	hosttest.WriteFile(t, filepath.Join(dir, "statistics/rx_bytes"), "x\n")
	if _, err := ReadNetInterface(dir); err == nil || !strings.Contains(err.Error(), "rx_bytes") {
		t.Errorf("garbled counter: error %v", err)
	}
}
