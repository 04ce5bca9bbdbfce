// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// What every gpudiag BPF object shares: the set of processes whose I/O and
// network traffic are counted. User space fills it each cycle with the GPU
// processes (root == tgid) and the descendants it finds in /proc; the
// tracking object adds children the moment they fork and removes processes
// when their last thread exits.
#pragma once

// MAX_TRACKED_PROCESSES bounds the processes followed at once: GPU processes
// and their descendants. A node with 8 GPUs, one process each and 64
// DataLoader workers per process needs 520. A fork that finds the table full
// is not tracked and is counted in the tracking object's lost counter. The
// loader may lower or raise it before loading.
#define MAX_TRACKED_PROCESSES 8192

struct tracked_process {
	// root is the tgid of the GPU process this one is or descends from.
	__u32 root;
	__u32 reserved;
};

// tracked_processes: tgid -> tracked_process. Every object declares it; the
// loader shares the tracking object's map with the others.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TRACKED_PROCESSES);
	__type(key, __u32);
	__type(value, struct tracked_process);
} tracked_processes SEC(".maps");

static __always_inline struct tracked_process *current_tracked(__u32 *tgid)
{
	*tgid = bpf_get_current_pid_tgid() >> 32;
	return bpf_map_lookup_elem(&tracked_processes, tgid);
}

// lost_events counts what could not be recorded, by the reasons each object
// defines; one slot per CPU, so counting never contends.
#define LOST_REASONS 4
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOST_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} lost_events SEC(".maps");

static __always_inline void count_lost(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&lost_events, &reason);
	if (n)
		(*n)++;
}
