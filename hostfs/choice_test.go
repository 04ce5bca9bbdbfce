package hostfs

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// FuzzActiveChoice checks the two readers of bracketed sysfs choices
// (transparent_hugepage/enabled, queue/scheduler): the active value is one
// of the file's words, bracketed, and renders back to itself.
func FuzzActiveChoice(f *testing.F) {
	f.Add(string(hosttest.Seed(f, "sys/kernel/mm/transparent_hugepage/enabled")))
	f.Add(string(hosttest.Seed(f, "sys/devices/pci0000:3b/0000:3b:01.0/0000:3c:00.0/nvme/nvme0/nvme0n1/queue/scheduler")))
	for _, s := range []string{"none\n", "[]", "[[x]]", "a [b] [c]", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words := strings.Fields(s)
		if v, err := ActiveChoice(s); err == nil {
			if v == "" || !slices.Contains(words, "["+v+"]") {
				t.Fatalf("%q: active %q", s, v)
			}
			if again, err := ActiveChoice("never [" + v + "] always\n"); err != nil || again != v {
				t.Fatalf("%q reads back as %q, %v", v, again, err)
			}
		} else if !strings.Contains(err.Error(), "no [active] value") {
			t.Fatalf("error %v", err)
		}
		if v := ActiveScheduler(s); v != "" && !slices.Contains(words, "["+v+"]") && !slices.Equal(words, []string{v}) {
			t.Fatalf("%q: scheduler %q", s, v)
		}
	})
}
