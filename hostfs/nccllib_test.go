package hostfs

import (
	"path/filepath"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestNCCLLibraryVersion(t *testing.T) {
	for base, want := range map[string]string{
		"libnccl.so.2.28.9": "2.28.9", "libnccl.so.2.18.3": "2.18.3", "libnccl.so.2": "", "libnccl.so": "", "libnccl.so.2.28": "",
	} {
		if got := NCCLVersionFromFileName(base); got != want {
			t.Errorf("NCCLVersionFromFileName(%q) = %q; want %q", base, got, want)
		}
	}
	root := t.TempDir()
	site := "/venv/lib/python3.12/site-packages"
	lib := site + "/nvidia/nccl/lib/libnccl.so.2"
	hosttest.WriteFile(t, filepath.Join(root, site, "nvidia_nccl_cu12-2.27.3.post1.dist-info", "METADATA"), "")
	hosttest.WriteFile(t, filepath.Join(root, site, "torch-2.8.0.dist-info", "METADATA"), "")
	if got := PipNCCLVersion(root, lib); got != "2.27.3" {
		t.Errorf("pip version %q; want 2.27.3", got)
	}
	if got := PipNCCLVersion(root, "/usr/lib/libnccl.so.2"); got != "" {
		t.Errorf("non-pip path gave %q", got)
	}
	hosttest.WriteFile(t, filepath.Join(root, site, "nvidia_nccl_cu13-2.28.9.dist-info", "METADATA"), "")
	if got := PipNCCLVersion(root, lib); got != "" {
		t.Errorf("two installs gave %q; want none", got)
	}
}
