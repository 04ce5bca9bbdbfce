package hostfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/hostfile"
)

// A daemon in a cgroup namespace of its own (containerd and Docker give
// each container one on cgroup v2) reads other processes' cgroups in
// /proc/<pid>/cgroup relative to its namespace's root: "/../../kubepods…".
// The cgroup filesystem under --path.sysfs, bind-mounted from the host,
// shows the host's hierarchy. NamespaceRoot finds the host path of that
// root, so that such paths can be read there.

// cgroupScanDirs bounds the directories looked at to find the root.
const cgroupScanDirs = 20000

// cgroupProcsBytes bounds one cgroup.procs: 8 bytes a process.
const cgroupProcsBytes = 4 << 20

// CgroupNamespaceRoot returns the host path of the cgroup (v2) namespace
// the daemon, process self, runs in: "" when it sees the host's hierarchy
// (init's cgroup reads as a path under "/", not above it). initCgroup is
// init's unified cgroup path as /proc/1/cgroup shows it to the daemon;
// "/../../.." means the namespace's root sits three levels below the
// host's. The root is the directory at that depth of the host's
// hierarchy whose cgroup.procs lists self (the daemon runs in its
// namespace's root).
func (f FS) CgroupNamespaceRoot(initCgroup string, self int) (string, error) {
	depth := 0
	for rest := initCgroup; strings.HasPrefix(rest, "/.."); rest = strings.TrimPrefix(rest, "/..") {
		depth++
	}
	if depth == 0 {
		return "", nil
	}
	root := f.SysPath(CgroupRoot)
	want := strconv.Itoa(self)
	level := []string{"/"}
	seen := 0
	for d := 0; d < depth; d++ {
		var next []string
		for _, dir := range level {
			h, err := hostfile.OpenDir(path.Join(root, dir))
			if err != nil {
				continue // removed meanwhile
			}
			entries, err := h.ReadDir(-1)
			h.Close()
			if err != nil && !errors.Is(err, io.EOF) {
				continue
			}
			for _, e := range entries {
				if !e.IsDir() {
					continue // an interface file (cpu.max, cgroup.procs…)
				}
				if seen++; seen > cgroupScanDirs {
					return "", fmt.Errorf("%s: more than %d cgroups above depth %d", root, cgroupScanDirs, depth)
				}
				next = append(next, path.Join(dir, e.Name()))
			}
		}
		sort.Strings(next)
		level = next
	}
	for _, dir := range level {
		b, err := hostfile.Read(path.Join(root, dir, "cgroup.procs"), cgroupProcsBytes)
		if err != nil {
			continue
		}
		if slices.Contains(strings.Fields(string(b)), want) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%s: no cgroup at depth %d lists process %d: %w", root, depth, self, fs.ErrNotExist)
}

// HostCgroupPath turns a cgroup path as /proc/<pid>/cgroup shows it to a
// daemon whose namespace root is nsRoot ("" for the host's) into the
// host's path; ok is false when it climbs above the host's root.
func HostCgroupPath(nsRoot, p string) (string, bool) {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if nsRoot == "" {
		if strings.HasPrefix(p, "/..") {
			return "", false
		}
		return path.Clean(p), true
	}
	up := strings.Count(nsRoot, "/")
	if nsRoot == "/" {
		up = 0
	}
	climb := 0
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			climb++
		} else if e != "" {
			break
		}
	}
	if climb > up {
		return "", false
	}
	return path.Clean(path.Join(nsRoot, p)), true
}
