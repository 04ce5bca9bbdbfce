package hostfs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// The daemon (pid 77) runs in the root of its own cgroup namespace, three
// levels below the host's root: init's cgroup reads "/../../../init.scope"
// to it. The root is the cgroup at depth 3 that lists it.
func TestCgroupNamespaceRoot(t *testing.T) {
	sys := t.TempDir()
	cg := filepath.Join(sys, "fs/cgroup")
	for dir, procs := range map[string]string{
		"init.scope": "1\n",
		"kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope": "4242\n4343\n",
		"kubepods.slice/kubepods-pod9.slice/cri-containerd-gpu.scope": "70\n77\n",
		"kubepods.slice/kubepods-pod9.slice/cri-containerd-x.scope":   "",
		"system.slice/containerd.service":                             "500\n",
	} {
		hosttest.WriteFile(t, filepath.Join(cg, dir, "cgroup.procs"), procs)
		hosttest.WriteFile(t, filepath.Join(cg, dir, "cpu.max"), "max 100000\n")
	}
	f, err := NewFS(t.TempDir(), sys)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		init    string
		self    int
		want    string
		wantErr string
	}{
		{"/init.scope", 77, "", ""},
		{"/", 77, "", ""},
		{"/../../../init.scope", 77, "/kubepods.slice/kubepods-pod9.slice/cri-containerd-gpu.scope", ""},
		{"/../../../init.scope", 78, "", "no cgroup at depth 3 lists process 78"},
	} {
		got, err := f.CgroupNamespaceRoot(tc.init, tc.self)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s, %d: error %v; want %q", tc.init, tc.self, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s, %d: got %q, %v; want %q", tc.init, tc.self, got, err, tc.want)
		}
	}
}

func TestHostCgroupPath(t *testing.T) {
	for _, tc := range []struct {
		ns, p, want string
		ok          bool
	}{
		{"", "/kubepods.slice/a.scope", "/kubepods.slice/a.scope", true},
		{"", "/../a.scope", "", false},
		{"/k/p9/c", "/", "/k/p9/c", true},
		{"/k/p9/c", "/../../p1/d", "/k/p1/d", true},
		{"/k/p9/c", "/../../../../x", "", false},
		{"/", "/a", "/a", true},
	} {
		got, ok := HostCgroupPath(tc.ns, tc.p)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q, %q: got %q %v; want %q %v", tc.ns, tc.p, got, ok, tc.want, tc.ok)
		}
	}
}
