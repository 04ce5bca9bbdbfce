package sockdiag

import (
	"os"
	"testing"

	"github.com/prometheus/procfs"
)

// One readlink gives what procfs's Namespaces reads for "net".
func TestNetNamespaceInodeMatchesProcfs(t *testing.T) {
	self, err := procfs.Self()
	if err != nil {
		t.Skip(err)
	}
	ns, err := self.Namespaces()
	if err != nil {
		t.Skip(err)
	}
	got, known, err := NetNamespaceInode("/proc", os.Getpid())
	if err != nil || known != (ns["net"].Inode != 0) || got != ns["net"].Inode {
		t.Errorf("%d, %v, %v; procfs %d", got, known, err, ns["net"].Inode)
	}
	if _, known, err := NetNamespaceInode("/proc", 1<<30); known || err != nil {
		t.Errorf("absent process: known %v, %v", known, err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(dir+"/1/ns", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("net:[x]", dir+"/1/ns/net"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := NetNamespaceInode(dir, 1); err == nil {
		t.Error("net:[x] parsed")
	}
}
