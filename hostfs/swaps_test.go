package hostfs

import (
	"errors"
	"io/fs"
	"testing"
)

func TestSwapTotals(t *testing.T) {
	host, err := NewFS("testdata/host/proc", "testdata/host/sys")
	if err != nil {
		t.Fatal(err)
	}
	got, err := host.SwapTotals()
	if want := (SwapTotals{Devices: 1, SizeBytes: 8388604 << 10, UsedBytes: 1024 << 10}); err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	noSwap, err := NewFS(t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noSwap.SwapTotals(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("kernel without swap: error %v; want fs.ErrNotExist", err)
	}
}
