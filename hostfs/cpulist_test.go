package hostfs

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"\n", nil, false},
		{"5", []int{5}, false},
		{"0-3", []int{0, 1, 2, 3}, false},
		{"0-1,64-65\n", []int{0, 1, 64, 65}, false},
		{"8,2-3,3", []int{2, 3, 8}, false},
		{"3-1", nil, true},
		{"a", nil, true},
		{"1,,2", nil, true},
		{"-1", nil, true},
		{"0-", nil, true},
		{"0-99999999", nil, true},
	} {
		got, err := ParseCPUList(tc.in)
		if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// formatList renders sorted members in the kernel's list format, runs
// collapsed into ranges: the inverse of ParseCPUList.
func formatList(ids []int) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ids[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ids[j]))
		}
		i = j + 1
	}
	return b.String()
}

// checkList asserts what every parsed kernel list is: sorted, distinct
// members within the bound, which render back to the same list.
func checkList(t *testing.T, what string, ids []int) {
	t.Helper()
	for i, id := range ids {
		if id < 0 || id >= MaxListID || i > 0 && id <= ids[i-1] {
			t.Fatalf("%s: members %v not sorted, distinct and in [0, %d)", what, ids, MaxListID)
		}
	}
	again, err := ParseCPUList(formatList(ids))
	if err != nil || !slices.Equal(again, ids) {
		t.Fatalf("%s: %v renders as %q, which parses as %v, %v", what, ids, formatList(ids), again, err)
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-31,64-95", "5", "", " 0 ", "0-1,1-2", "3,1,2", "1-0", "0-65535", "x", "0-", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var ids []int
		var err error
		hosttest.WithinHangLimit(t, func() { ids, err = ParseCPUList(s) })
		if err != nil || strings.TrimSpace(s) == "" {
			return
		}
		checkList(t, strconv.Quote(s), ids)
		if len(ids) > MaxListID {
			t.Fatalf("%d members", len(ids))
		}
		// Both ends of every entry are members: nothing is dropped. And
		// the entries name no more than the bound, repeats included: the
		// work a list costs is bounded.
		named := 0
		for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			if !isRange {
				hi = lo
			}
			a, errLo := strconv.Atoi(lo)
			b, errHi := strconv.Atoi(hi)
			if errLo != nil || errHi != nil || !slices.Contains(ids, a) || !slices.Contains(ids, b) {
				t.Fatalf("%q: an end of entry %q is missing from %v", s, part, ids)
			}
			named += b - a + 1
		}
		if named > MaxListID {
			t.Fatalf("%q names %d members; want an error past %d", s, named, MaxListID)
		}
	})
}
