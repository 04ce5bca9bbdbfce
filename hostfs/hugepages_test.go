package hostfs

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestHugepages(t *testing.T) {
	got, err := NewSysFS("testdata/host/sys").Hugepages()
	want := []HugepagePool{{PageBytes: 2 << 20}, {PageBytes: 1 << 30, Total: 16, Free: 4}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	if got, err := NewSysFS(t.TempDir()).Hugepages(); got != nil || err != nil {
		t.Fatalf("no hugetlbfs: got %v, %v", got, err)
	}
	for _, tc := range []struct{ file, text, wantErr string }{
		{"kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "many", "nr_hugepages: not an unsigned integer"},
		{"kernel/mm/hugepages/hugepages-xkB/nr_hugepages", "1", "not a hugepage size"},
	} {
		sys := t.TempDir()
		hosttest.WriteFile(t, filepath.Join(sys, tc.file), tc.text)
		if _, err := NewSysFS(sys).Hugepages(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v; want %q", tc.file, err, tc.wantErr)
		}
	}
}
