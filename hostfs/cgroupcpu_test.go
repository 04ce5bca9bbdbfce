package hostfs

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseCPUMax(t *testing.T) {
	for _, tc := range []struct {
		in            string
		quota, period uint64
		limited       bool
		wantErr       string
	}{
		{"max 100000\n", 0, 100000, false, ""},
		{"50000 100000\n", 50000, 100000, true, ""},
		{"10000 100000", 10000, 100000, true, ""},
		{"max\n", 0, 0, false, "want \"$MAX $PERIOD\""},
		{"max 0\n", 0, 0, false, "period is not a positive integer"},
		{"-1 100000\n", 0, 0, false, "quota is neither max nor an integer"},
		{"", 0, 0, false, "want"},
	} {
		q, p, l, err := ParseCPUMax("cpu.max", []byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "cpu.max: ") {
				t.Errorf("%q: error %v; want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || q != tc.quota || p != tc.period || l != tc.limited {
			t.Errorf("%q: got %d %d %v %v", tc.in, q, p, l, err)
		}
	}
}

func TestParseCgroupCPUStat(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     CgroupCPUStat
		wantErr  string
	}{
		{"v2", "usage_usec 9000\nuser_usec 8000\nsystem_usec 1000\nnr_periods 120\nnr_throttled 30\nthrottled_usec 2500000\nnr_bursts 0\nburst_usec 0\n",
			CgroupCPUStat{Periods: 120, ThrottledPeriods: 30, ThrottledMicros: 2500000}, ""},
		{"v1 in ns", "nr_periods 10\nnr_throttled 2\nthrottled_time 3000000\n",
			CgroupCPUStat{Periods: 10, ThrottledPeriods: 2, ThrottledMicros: 3000}, ""},
		{"v2 without the cpu controller", "usage_usec 9000\nuser_usec 8000\nsystem_usec 1000\n", CgroupCPUStat{}, ""},
		{"not a number", "nr_periods ten\n", CgroupCPUStat{}, "nr_periods: not an unsigned integer"},
	} {
		got, err := ParseCgroupCPUStat("cpu.stat", []byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v; want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// The binding quota is the smallest in cores over the process's cgroup and
// its ancestors (a pod's limit above its container's), and the throttling
// counters are that cgroup's.
func TestCgroupCPU(t *testing.T) {
	const pod = "/kubepods.slice/kubepods-pod1.slice"
	const ctr = pod + "/cri-containerd-abc.scope"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		cgs     []procfs.Cgroup
		nsRoot  string
		want    CgroupCPULimit
		wantErr string
	}{
		{"v2 container quota binds", map[string]string{
			"fs/cgroup" + pod + "/cpu.max":  "800000 100000\n",
			"fs/cgroup" + pod + "/cpu.stat": "nr_periods 5\nnr_throttled 0\nthrottled_usec 0\n",
			"fs/cgroup" + ctr + "/cpu.max":  "200000 100000\n",
			"fs/cgroup" + ctr + "/cpu.stat": "usage_usec 1\nnr_periods 100\nnr_throttled 40\nthrottled_usec 1500000\n",
		}, []procfs.Cgroup{{HierarchyID: 0, Path: ctr}}, "",
			CgroupCPULimit{Path: ctr, Version: 2, Limited: true, QuotaMicros: 200000, PeriodMicros: 100000, Periods: 100, ThrottledPeriods: 40, ThrottledMicros: 1500000}, ""},
		{"v2 pod quota binds", map[string]string{
			"fs/cgroup" + pod + "/cpu.max":  "50000 100000\n",
			"fs/cgroup" + pod + "/cpu.stat": "nr_periods 7\nnr_throttled 6\nthrottled_usec 900\n",
			"fs/cgroup" + ctr + "/cpu.max":  "max 100000\n",
			"fs/cgroup" + ctr + "/cpu.stat": "nr_periods 1\nnr_throttled 0\nthrottled_usec 0\n",
		}, []procfs.Cgroup{{HierarchyID: 0, Path: ctr}}, "",
			CgroupCPULimit{Path: pod, Version: 2, Limited: true, QuotaMicros: 50000, PeriodMicros: 100000, Periods: 7, ThrottledPeriods: 6, ThrottledMicros: 900}, ""},
		{"v2 no quota", map[string]string{
			"fs/cgroup" + ctr + "/cpu.max":  "max 100000\n",
			"fs/cgroup" + ctr + "/cpu.stat": "usage_usec 1\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
		}, []procfs.Cgroup{{HierarchyID: 0, Path: ctr}}, "",
			CgroupCPULimit{Path: ctr, Version: 2}, ""},
		{"v1 cpu,cpuacct", map[string]string{
			"fs/cgroup/cpu,cpuacct/cpu.cfs_period_us":            "100000\n",
			"fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":             "-1\n",
			"fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
			"fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us":  "150000\n",
			"fs/cgroup/cpu,cpuacct/docker/abc/cpu.stat":          "nr_periods 20\nnr_throttled 4\nthrottled_time 2000000000\n",
		}, []procfs.Cgroup{{HierarchyID: 4, Controllers: []string{"cpu", "cpuacct"}, Path: "/docker/abc"}, {HierarchyID: 0, Path: "/"}}, "",
			CgroupCPULimit{Path: "/docker/abc", Version: 1, Limited: true, QuotaMicros: 150000, PeriodMicros: 100000, Periods: 20, ThrottledPeriods: 4, ThrottledMicros: 2000000}, ""},
		{"v2 seen from the daemon's own cgroup namespace", map[string]string{
			"fs/cgroup" + pod + "/cpu.max":  "max 100000\n",
			"fs/cgroup" + ctr + "/cpu.max":  "200000 100000\n",
			"fs/cgroup" + ctr + "/cpu.stat": "nr_periods 100\nnr_throttled 40\nthrottled_usec 1500000\n",
		}, []procfs.Cgroup{{HierarchyID: 0, Path: "/../../kubepods-pod1.slice/cri-containerd-abc.scope"}}, "/kubepods.slice/kubepods-pod9.slice/cri-containerd-gpudiag.scope",
			CgroupCPULimit{Path: ctr, Version: 2, Limited: true, QuotaMicros: 200000, PeriodMicros: 100000, Periods: 100, ThrottledPeriods: 40, ThrottledMicros: 1500000}, ""},
		{"v2 above the namespace, root unknown", nil, []procfs.Cgroup{{HierarchyID: 0, Path: "/../../x.scope"}}, "", CgroupCPULimit{}, "outside the daemon's cgroup namespace"},
		{"bad cpu.max", map[string]string{
			"fs/cgroup" + ctr + "/cpu.max": "lots 100000\n",
		}, []procfs.Cgroup{{HierarchyID: 0, Path: ctr}}, "", CgroupCPULimit{}, "cpu.max: quota is neither max nor an integer"},
		{"no hierarchy", nil, []procfs.Cgroup{{HierarchyID: 3, Controllers: []string{"memory"}, Path: "/"}}, "", CgroupCPULimit{}, "no cpu or unified cgroup hierarchy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := t.TempDir()
			for name, text := range tc.files {
				hosttest.WriteFile(t, filepath.Join(sys, name), text)
			}
			host, err := NewFS(t.TempDir(), sys)
			if err != nil {
				t.Fatal(err)
			}
			got, err := host.CgroupCPU(tc.cgs, tc.nsRoot)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if c := (CgroupCPULimit{Limited: true, QuotaMicros: 10000, PeriodMicros: 100000}).QuotaCores(); c != 0.1 {
		t.Errorf("quota cores %v; want 0.1", c)
	}
}

func FuzzParseCPUMax(f *testing.F) {
	f.Add(hosttest.Seed(f, "sys/fs/cgroup/system.slice/docker-8c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d.scope/cpu.max"))
	f.Add([]byte("max 100000\n"))
	f.Add([]byte("10000 100000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var err error
		var limited bool
		var period uint64
		hosttest.WithinHangLimit(t, func() { _, period, limited, err = ParseCPUMax("cpu.max", data) })
		if err != nil {
			hosttest.CheckError(t, err, "cpu.max: ")
			return
		}
		if period == 0 {
			t.Fatalf("period 0 accepted (limited %v)", limited)
		}
	})
}

func FuzzParseCgroupCPUStat(f *testing.F) {
	f.Add(hosttest.Seed(f, "sys/fs/cgroup/system.slice/docker-8c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d.scope/cpu.stat"))
	f.Add([]byte("usage_usec 9000\nnr_periods 120\nnr_throttled 30\nthrottled_usec 2500000\n"))
	f.Add([]byte("nr_periods 10\nnr_throttled 2\nthrottled_time 3000000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var err error
		var st CgroupCPUStat
		hosttest.WithinHangLimit(t, func() { st, err = ParseCgroupCPUStat("cpu.stat", data) })
		if err != nil {
			hosttest.CheckError(t, err, "cpu.stat: ")
			return
		}
		if st.Periods > 0 && !bytes.Contains(data, []byte("nr_periods")) {
			t.Fatalf("periods %d without a nr_periods line", st.Periods)
		}
	})
}
