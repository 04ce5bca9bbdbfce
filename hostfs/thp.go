package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// TransparentHugepage reads the active modes of
// /sys/kernel/mm/transparent_hugepage: enabled (always, madvise, never)
// and defrag. A kernel built without THP has neither file: both are "".
func (f FS) TransparentHugepage() (enabled, defrag string, err error) {
	dir := f.SysPath("kernel/mm/transparent_hugepage")
	for _, a := range []struct {
		name string
		dst  *string
	}{{"enabled", &enabled}, {"defrag", &defrag}} {
		path := filepath.Join(dir, a.name)
		b, err := ReadAttr(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", "", err
		}
		v, err := ActiveChoice(string(b))
		if err != nil {
			return "", "", fmt.Errorf("parsing %s: %w", path, err)
		}
		*a.dst = v
	}
	return enabled, defrag, nil
}
