package gpu

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

type failingBackend struct{ name string }

func (f failingBackend) Name() string { return f.name }
func (failingBackend) Sample(context.Context) (*sample.GPUs, error) {
	return nil, errors.New("x")
}
func (failingBackend) Close() error { return nil }

func TestBackendSelection(t *testing.T) {
	dcgmErr := errors.New("DCGM: libdcgm.so.4 not found")
	nvmlErr := errors.New("NVML: libnvidia-ml.so.1 not found")
	for _, tc := range []struct {
		mode            string
		dcgmOK, nvmlOK  bool
		want, reasonHas string
	}{
		{"auto", true, true, "dcgm", ""},
		{"auto", false, true, "nvml", "libdcgm"},
		{"auto", false, false, "", "libnvidia-ml"},
		{"nvml", true, true, "nvml", ""},
		{"dcgm", false, true, "", "libdcgm"},
		{"none", true, true, "", "disabled"},
	} {
		openDCGM := func() (Backend, error) {
			if tc.dcgmOK {
				return failingBackend{"dcgm"}, nil
			}
			return nil, dcgmErr
		}
		openNVML := func() (Backend, error) {
			if tc.nvmlOK {
				return failingBackend{"nvml"}, nil
			}
			return nil, nvmlErr
		}
		b, why := Open(tc.mode, Options{OpenDCGM: openDCGM, OpenNVML: openNVML})
		got := ""
		if b != nil {
			got = b.Name()
		}
		if got != tc.want || !strings.Contains(why, tc.reasonHas) {
			t.Errorf("mode %s dcgm=%v nvml=%v: got %q (%q); want %q with %q", tc.mode, tc.dcgmOK, tc.nvmlOK, got, why, tc.want, tc.reasonHas)
		}
	}
}
