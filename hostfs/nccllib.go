package hostfs

import (
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gpudiag/gpudiag/hostfile"
)

// pipDirMaxEntries bounds the entries of a site-packages directory looked
// through for NCCL's dist-info; the directory is the process user's to
// fill. A large environment holds a few thousand packages.
const pipDirMaxEntries = 1 << 16

var ncclFileVersion = regexp.MustCompile(`^libnccl\.so\.(\d+\.\d+\.\d+)$`)

// NCCLVersionFromFileName reads x.y.z from libnccl.so.x.y.z. Distribution
// and conda packages map the fully versioned file (libnccl.so.2 is a
// symlink to it, and the map names the file itself).
func NCCLVersionFromFileName(base string) string {
	if m := ncclFileVersion.FindStringSubmatch(base); m != nil {
		return m[1]
	}
	return ""
}

var pipVersionPrefix = regexp.MustCompile(`^\d+\.\d+\.\d+`)

// PipNCCLVersion finds the version of a libnccl.so.2 installed by pip
// (<site-packages>/nvidia/nccl/lib/, the PyTorch wheels' dependency) from
// the nvidia_nccl_cu<N>-<version>.dist-info directory beside it, read
// through the process's root. Empty when not a pip install, or when two
// versions' metadata are present.
func PipNCCLVersion(root, libPath string) string {
	libDir := filepath.Dir(libPath)
	ncclDir := filepath.Dir(libDir)
	nvidiaDir := filepath.Dir(ncclDir)
	if filepath.Base(libDir) != "lib" || filepath.Base(ncclDir) != "nccl" || filepath.Base(nvidiaDir) != "nvidia" {
		return ""
	}
	// The directory is the process user's: resolved inside its root, and
	// read in batches so that a directory of millions of entries costs a
	// bounded scan, not their names all at once.
	d, err := hostfile.OpenDirInRoot(root, filepath.Dir(nvidiaDir))
	if err != nil {
		return ""
	}
	defer d.Close()
	found := ""
	for seen := 0; seen < pipDirMaxEntries; {
		names, err := d.Readdirnames(256)
		if len(names) == 0 || err != nil && !errors.Is(err, io.EOF) {
			break
		}
		seen += len(names)
		v, ok := pipNCCLVersionIn(names, found)
		if !ok {
			return ""
		}
		found = v
	}
	return found
}

// pipNCCLVersionIn looks through directory entries for
// nvidia_nccl_cu<N>-<version>.dist-info; found is the version seen in
// earlier entries. ok is false when two versions are present.
func pipNCCLVersionIn(names []string, found string) (string, bool) {
	for _, n := range names {
		pkg, ok := strings.CutSuffix(n, ".dist-info")
		if !ok || !strings.HasPrefix(pkg, "nvidia_nccl_cu") {
			continue
		}
		_, v, ok := strings.Cut(pkg, "-")
		if !ok {
			continue
		}
		v = pipVersionPrefix.FindString(v)
		if v == "" {
			continue
		}
		if found != "" && found != v {
			return "", false
		}
		found = v
	}
	return found, true
}
