//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// Follows the descendants of the GPU processes as they fork and exit, so that
// a DataLoader worker is counted from its first read, not from the next time
// user space scans /proc.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "tracking.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

enum tracking_lost_reason {
	// A child of a tracked process could not be added: the table is full.
	LOST_TRACKING_FULL = 0,
};

SEC("tp_btf/sched_process_fork")
int BPF_PROG(track_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 parent_tgid = parent->tgid;
	__u32 child_tgid = child->tgid;
	// A new thread shares its creator's tgid and is already covered.
	if (child_tgid == parent_tgid)
		return 0;
	if (!maybe_tracked(parent_tgid))
		return 0;
	struct tracked_process *p = bpf_map_lookup_elem(&tracked_processes, &parent_tgid);
	if (!p)
		return 0;
	struct tracked_process c = { .root = p->root };
	long err = bpf_map_update_elem(&tracked_processes, &child_tgid, &c, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST */) {
		count_lost(LOST_TRACKING_FULL);
		return 0;
	}
	// In the table first, then in the hint: a set bit always finds it.
	__u32 bit = hint_bit(child_tgid), word = bit >> 6;
	__u64 *w = bpf_map_lookup_elem(&tracked_hint_fork, &word);
	if (w)
		__sync_fetch_and_or(w, 1ULL << (bit & 63));
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(track_exit, struct task_struct *task)
{
	// The tracepoint fires for every exiting thread, after signal->live
	// was decremented: zero means this was the last one and the tgid is
	// about to be released for reuse.
	if (task->signal->live.counter != 0)
		return 0;
	__u32 tgid = task->tgid;
	bpf_map_delete_elem(&tracked_processes, &tgid);
	return 0;
}
