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

// The tracked-process hint: a 65,536-bit filter in front of the table, set
// for every tracked tgid, so that the untracked processes (nearly all of a
// node's block requests and socket calls) are turned away by an array
// lookup, which the verifier inlines, instead of a hash lookup. A set bit
// may be stale or shared (the table then answers); a tracked process's bit
// is always set. User space writes tracked_hint_user (one writer) for the
// processes it adds and rebuilds it from the table now and then to drop
// stale bits; the fork program ORs children into tracked_hint_fork, which
// user space clears before such a rebuild.
#define TRACKED_HINT_WORDS 1024

struct tracked_hint {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRACKED_HINT_WORDS);
	__type(key, __u32);
	__type(value, __u64);
};
struct tracked_hint tracked_hint_user SEC(".maps");
struct tracked_hint tracked_hint_fork SEC(".maps");

// hint_bit spreads tgids, which are dense and sequential, over the filter:
// a multiplicative hash keeping 16 bits. bpf.hintBit is its twin.
static __always_inline __u32 hint_bit(__u32 tgid)
{
	return (tgid * 2654435761u) >> 16;
}

static __always_inline bool maybe_tracked(__u32 tgid)
{
	__u32 bit = hint_bit(tgid), word = bit >> 6;
	__u64 mask = 1ULL << (bit & 63);
	__u64 *w = bpf_map_lookup_elem(&tracked_hint_user, &word);
	if (w && (*w & mask))
		return true;
	w = bpf_map_lookup_elem(&tracked_hint_fork, &word);
	return w && (*w & mask);
}

static __always_inline struct tracked_process *current_tracked(__u32 *tgid)
{
	*tgid = bpf_get_current_pid_tgid() >> 32;
	if (!maybe_tracked(*tgid))
		return NULL;
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
