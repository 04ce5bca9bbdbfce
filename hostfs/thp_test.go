package hostfs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestTransparentHugepage(t *testing.T) {
	enabled, defrag, err := NewSysFS("testdata/host/sys").TransparentHugepage()
	if err != nil || enabled != "always" || defrag != "madvise" {
		t.Fatalf("got %q %q, %v; want always madvise", enabled, defrag, err)
	}
	if enabled, defrag, err := NewSysFS(t.TempDir()).TransparentHugepage(); enabled != "" || defrag != "" || err != nil {
		t.Fatalf("kernel without THP: got %q %q, %v", enabled, defrag, err)
	}
	sys := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(sys, "kernel/mm/transparent_hugepage/enabled"), "always madvise never\n")
	if _, _, err := NewSysFS(sys).TransparentHugepage(); err == nil || !strings.Contains(err.Error(), "transparent_hugepage/enabled") {
		t.Fatalf("no active mode: error %v; want one naming the file", err)
	}
}
