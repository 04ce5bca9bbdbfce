package hostfs

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// FuzzSysfsAttributes checks the one-value attribute parsers: a value read
// renders as an attribute that reads the same, a NUMA node is a node the
// kernel could have printed, and errors name the file and stay short.
func FuzzSysfsAttributes(f *testing.F) {
	for _, rel := range []string{
		"sys/devices/pci0000:b7/0000:b7:01.0/0000:b8:00.0/0000:b9:00.0/0000:ba:00.0/numa_node",
		"sys/devices/pci0000:b7/0000:b7:01.0/0000:b8:00.0/0000:b9:00.0/0000:ba:00.0/vendor",
		"sys/devices/pci0000:b7/0000:b7:01.0/0000:b8:00.0/0000:b9:00.0/0000:ba:00.0/class",
		"sys/devices/pci0000:3b/0000:3b:01.0/0000:3c:00.0/nvme/nvme0/nvme0n1/queue/read_ahead_kb",
	} {
		f.Add(hosttest.Seed(f, rel))
	}
	for _, s := range []string{"-1\n", "18446744073709551615\n", "18446744073709551616", "0x", "+1", " 7 \n", "1\n2\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if v, err := ParseUintAttr("attr", data); err != nil {
			hosttest.CheckError(t, err, "attr: ")
		} else if again, err := ParseUintAttr("attr", []byte(strconv.FormatUint(v, 10)+"\n")); err != nil || again != v {
			t.Fatalf("%d reads back as %d, %v", v, again, err)
		}
		if n, err := ParseNUMANodeAttr("numa_node", data); err != nil {
			hosttest.CheckError(t, err, "numa_node: ")
			if n != -1 {
				t.Fatalf("node %d with error %v; want -1, unknown", n, err)
			}
		} else if n < -1 || n >= MaxListID {
			t.Fatalf("node %d", n)
		} else if again, err := ParseNUMANodeAttr("numa_node", []byte(strconv.Itoa(n)+"\n")); err != nil || again != n {
			t.Fatalf("node %d reads back as %d, %v", n, again, err)
		}
		if v, err := ParseHexAttr("vendor", data); err != nil {
			hosttest.CheckError(t, err, "vendor: ")
		} else if again, err := ParseHexAttr("vendor", fmt.Appendf(nil, "0x%04x\n", v)); err != nil || again != v || v > math.MaxUint32 {
			t.Fatalf("%#x reads back as %#x, %v", v, again, err)
		}
	})
}
