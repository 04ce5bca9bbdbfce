package hostfs

import (
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/procfs"
)

var (
	// Kubernetes pod UIDs appear with dashes (cgroupfs driver) or with
	// underscores (systemd driver: kubepods-burstable-pod<uid>.slice).
	podUIDPattern      = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)
	containerIDPattern = regexp.MustCompile(`(?:^|[-/:])([0-9a-f]{64})(?:\.scope)?$`)
	slurmJobPattern    = regexp.MustCompile(`/job_([0-9]+)(?:/|$)`)
)

// CgroupIdentity picks the process's cgroup (the unified v2 one, else v1's
// cpuset, memory or first hierarchy) from what procfs read of
// /proc/<pid>/cgroup, and finds the container, pod and Slurm job in its
// path.
func CgroupIdentity(cgs []procfs.Cgroup) (path, containerID, podUID, slurmJob string) {
	best := -1
	rank := func(cg procfs.Cgroup) int {
		switch {
		case cg.HierarchyID == 0 && len(cg.Controllers) == 0:
			return 3
		case slices.Contains(cg.Controllers, "cpuset"):
			return 2
		case slices.Contains(cg.Controllers, "memory"):
			return 1
		}
		return 0
	}
	for i, cg := range cgs {
		if best < 0 || rank(cg) > rank(cgs[best]) {
			best = i
		}
	}
	if best < 0 {
		return "", "", "", ""
	}
	path = cgs[best].Path
	if m := podUIDPattern.FindStringSubmatch(path); m != nil {
		podUID = strings.ReplaceAll(m[1], "_", "-")
	}
	for _, elem := range strings.Split(path, "/") {
		if m := containerIDPattern.FindStringSubmatch(elem); m != nil {
			containerID = m[1]
		}
	}
	if m := slurmJobPattern.FindStringSubmatch(path); m != nil {
		slurmJob = m[1]
	}
	return path, containerID, podUID, slurmJob
}
