package nccl

import (
	"reflect"
	"testing"
)

func TestResolveVisibleGPUs(t *testing.T) {
	all := []VisibleGPU{{0, "a"}, {1, "b"}, {2, "c"}, {3, "d"}}
	uuids := map[string]string{"a": "GPU-aaaa1111", "b": "GPU-bbbb2222", "c": "GPU-cccc3333", "d": "GPU-ccdd4444"}
	uuid := func(g VisibleGPU) string { return uuids[g.BusID] }
	for _, tc := range []struct {
		name      string
		cuda      string
		cudaSet   bool
		nvidia    string
		nvidiaSet bool
		want      []int
		ok        bool
	}{
		{"nothing set", "", false, "", false, []int{0, 1, 2, 3}, true},
		{"indexes", "2,0", true, "", false, []int{0, 2}, true},
		{"CUDA stops at the first invalid entry", "1,9,2", true, "", false, []int{1}, true},
		{"empty CUDA_VISIBLE_DEVICES hides all", "", true, "", false, nil, true},
		{"UUID prefix", "GPU-bbbb", true, "", false, []int{1}, true},
		{"ambiguous UUID prefix is invalid", "GPU-cc", true, "", false, nil, true},
		{"container by index, CUDA position within it", "1", true, "3,1", true, []int{3}, true},
		{"container by UUID", "", false, "GPU-cccc3333,GPU-aaaa1111", true, []int{0, 2}, true},
		{"container with all", "3", true, "all", true, []int{3}, true},
		{"container with none", "", false, "void", true, nil, true},
		{"MIG device", "MIG-1234", true, "", false, nil, false},
		{"unknown container GPU", "", false, "7", true, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ResolveVisibleGPUs(all, tc.cuda, tc.cudaSet, tc.nvidia, tc.nvidiaSet, uuid)
			if ok != tc.ok || (ok && !reflect.DeepEqual(got, tc.want)) {
				t.Fatalf("got %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
