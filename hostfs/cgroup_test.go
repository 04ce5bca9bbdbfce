package hostfs

import (
	"testing"

	"github.com/prometheus/procfs"
)

// Container IDs as runtimes write them into cgroup paths.
const (
	gpPodContainer    = "3f9a1c2b4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"
	gpDockerContainer = "8c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d"
)

func TestCgroupIdentity(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		cgroups                     []procfs.Cgroup
		path, container, pod, slurm string
	}{
		{"kubernetes, systemd driver, v2",
			[]procfs.Cgroup{{Path: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-" + gpPodContainer + ".scope"}},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-" + gpPodContainer + ".scope",
			gpPodContainer, "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", ""},
		{"kubernetes, cgroupfs driver, v1 picks cpuset",
			[]procfs.Cgroup{
				{HierarchyID: 12, Controllers: []string{"pids"}, Path: "/"},
				{HierarchyID: 5, Controllers: []string{"cpuset"}, Path: "/kubepods/besteffort/pod0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d/" + gpDockerContainer},
			},
			"/kubepods/besteffort/pod0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d/" + gpDockerContainer,
			gpDockerContainer, "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", ""},
		{"cri-o", []procfs.Cgroup{{Path: "/kubepods.slice/crio-" + gpDockerContainer + ".scope"}},
			"/kubepods.slice/crio-" + gpDockerContainer + ".scope", gpDockerContainer, "", ""},
		{"slurm v2", []procfs.Cgroup{{Path: "/system.slice/slurmstepd.scope/job_73195/step_0/user/task_0"}},
			"/system.slice/slurmstepd.scope/job_73195/step_0/user/task_0", "", "", "73195"},
		{"plain host service", []procfs.Cgroup{{Path: "/user.slice/user-1000.slice/session-3.scope"}},
			"/user.slice/user-1000.slice/session-3.scope", "", "", ""},
		{"none", nil, "", "", "", ""},
	} {
		path, container, pod, slurm := CgroupIdentity(tc.cgroups)
		if path != tc.path || container != tc.container || pod != tc.pod || slurm != tc.slurm {
			t.Errorf("%s: got %q %q %q %q", tc.name, path, container, pod, slurm)
		}
	}
}
