//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// Block request latency per disk and operation, and the block I/O of the
// tracked processes. A request is timed from block_rq_issue (handed to the
// driver) to its final block_rq_complete, as biolatency does, so the
// histogram is the device's service time. Where the kernel stamps the
// request itself at issue (io_start_time_ns, on every queue with I/O
// statistics callbacks, writeback throttling's among them: most disks),
// that stamp is used and an untracked request costs no table entry at all;
// elsewhere the issue time is kept in request_starts. The tracked processes' requests
// are attributed to the process that created them, recorded where the
// kernel builds the request from the process's bio (block_io_start, Linux
// 6.5+; blk_account_io_start before) or, on kernels with neither, at issue
// time; their wait runs from that point to completion, queueing included.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "tracking.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// Set by the loader: 1 when neither block_io_start nor blk_account_io_start
// can be attached, so the owner is taken at issue, in whatever context
// issues the request (the submitter for direct issue, a kworker otherwise).
const volatile __u8 owner_at_issue = 0;

// Set by the loader when the block_rq_merge program is attached: a request
// merged into another, freed without completing, then drops its owner
// there, and creating a request need not clear a stale one.
const volatile __u8 forget_on_merge = 0;

// LATENCY_SLOTS exp2 buckets of microseconds: slot 0 holds latencies under
// 1 µs, slot k in 1..LATENCY_SLOTS-2 those in [2^(k-1), 2^k) µs, and the
// last slot everything from 2^(LATENCY_SLOTS-2) µs (67 s) up.
#define LATENCY_SLOTS 28

enum disk_op {
	DISK_OP_READ = 0,
	DISK_OP_WRITE = 1,
	DISK_OP_FLUSH = 2,
	DISK_OP_DISCARD = 3, // discard, secure erase and write zeroes
	DISK_OP_OTHER = 4,   // zone management and driver-private requests
};

enum blockio_lost_reason {
	// A completion whose issue was not seen: in flight when the programs
	// attached, or whose issue found request_starts full.
	LOST_REQUEST_UNMATCHED = 0,
	LOST_DISK_LATENCY_FULL = 1,
	LOST_PROCESS_IO_FULL = 2,
	LOST_REQUEST_TABLE_FULL = 3,
};

struct request_start {
	__u64 owner_start_ns; // when the owner was recorded; 0 for no owner
	__u64 issue_ns;       // 0 until issued
	__u32 owner;          // tgid of a tracked process, or 0
	__u32 root;
};

// request_starts: request pointer -> request_start, for requests in flight.
// 16384 entries cover 16 NVMe drives with 1024 requests in flight each. An
// entry is removed at completion; one of a request merged into another
// before issue, at the merge (block_rq_merge) or, where the kernel lacks
// that tracepoint, when its pointer is reused. A request that finds the
// table full goes unmeasured and is counted lost.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct request_start);
} request_starts SEC(".maps");

// kernel_timed remembers, per disk, whether the kernel stamps its requests at
// issue, learned from each completion: then block_rq_issue has nothing to
// record. A direct-mapped array (slot by device number, the device kept to
// detect collisions) because array lookups are inlined by the verifier, a
// few instructions on the hot path where a hash lookup is a function call.
// A collision or a disk whose stamping stops only costs the table path.
#define KERNEL_TIMED_SLOTS 256
struct kernel_timed_slot {
	__u32 dev;
	__u32 timed;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KERNEL_TIMED_SLOTS);
	__type(key, __u32);
	__type(value, struct kernel_timed_slot);
} kernel_timed SEC(".maps");

// owner_slots holds the owner of a tracked process's request in flight,
// direct-mapped by request pointer and claimed with a compare-and-swap: a
// request of a GPU job costs an array lookup and a few stores instead of a
// hash insert and delete under the table's bucket lock. A request whose slot
// is taken (another request in flight maps there) goes to request_starts.
// 16384 slots hold the in-flight requests of many busy jobs with few
// collisions.
#define OWNER_SLOTS 16384
struct owner_slot {
	__u64 rq; // the request holding the slot; 0 when free
	__u64 owner_start_ns;
	__u32 owner;
	__u32 root;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, OWNER_SLOTS);
	__type(key, __u32);
	__type(value, struct owner_slot);
} owner_slots SEC(".maps");

struct disk_key {
	__u32 dev; // kernel dev_t of the whole disk: major << 20 | minor
	__u32 op;  // enum disk_op
};

struct disk_latency {
	__u64 slots[LATENCY_SLOTS];
	__u64 sum_ns;
};

// disk_latencies: per CPU, so that completions on many CPUs never contend. 128
// (disk, operation) pairs cover 32 disks doing reads, writes, flushes and
// discards.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 128);
	__type(key, struct disk_key);
	__type(value, struct disk_latency);
} disk_latencies SEC(".maps");

struct process_io_key {
	__u32 tgid;
	__u32 dev;
	__u32 op;
};

struct process_io {
	__u32 root;
	__u32 reserved;
	__u64 requests;
	__u64 bytes;
	__u64 wait_ns;
};

// process_io_totals: the tracked processes' completed requests, cumulative. 16384
// entries hold 8192 processes reading and writing one disk, or 520 (8 GPU
// processes with 64 workers each) on 15 disks. User space removes the
// entries of processes that exited once it has counted them.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct process_io_key);
	__type(value, struct process_io);
} process_io_totals SEC(".maps");

// The programs get the request as a BTF-typed pointer, so its fields are
// read with plain loads (relocated by CO-RE, faulting safely), not with
// bpf_probe_read_kernel calls: this runs on every request of the node.

// Before Linux 5.17 the request pointed at its disk directly.
struct request___with_rq_disk {
	struct gendisk *rq_disk;
} __attribute__((preserve_access_index));

static __always_inline __u32 request_dev(struct request *rq)
{
	struct gendisk *disk;
	struct request___with_rq_disk *old = (void *)rq;

	if (bpf_core_field_exists(old->rq_disk))
		disk = old->rq_disk;
	else
		disk = rq->q->disk;
	if (!disk)
		return 0;
	return ((__u32)disk->major << 20) | (__u32)disk->first_minor;
}

static __always_inline __u32 request_op(struct request *rq)
{
	switch (rq->cmd_flags & 0xff) { // REQ_OP_MASK
	case REQ_OP_READ:
		return DISK_OP_READ;
	case REQ_OP_WRITE:
		return DISK_OP_WRITE;
	case REQ_OP_FLUSH:
		return DISK_OP_FLUSH;
	case REQ_OP_DISCARD:
	case REQ_OP_SECURE_ERASE:
	case REQ_OP_WRITE_ZEROES:
		return DISK_OP_DISCARD;
	default:
		return DISK_OP_OTHER;
	}
}

static __always_inline struct kernel_timed_slot *kernel_timed_slot(__u32 dev)
{
	__u32 i = (dev ^ (dev >> 20) ^ (dev >> 8)) & (KERNEL_TIMED_SLOTS - 1);
	return bpf_map_lookup_elem(&kernel_timed, &i);
}

static __always_inline bool is_kernel_timed(__u32 dev)
{
	struct kernel_timed_slot *t = kernel_timed_slot(dev);
	return t && t->dev == dev && t->timed;
}

// set_kernel_timed writes only on a change, so that completions on many CPUs
// share the slot's cache line instead of bouncing it.
static __always_inline void set_kernel_timed(__u32 dev, __u32 timed)
{
	struct kernel_timed_slot *t = kernel_timed_slot(dev);
	if (t && (t->dev != dev || t->timed != timed)) {
		t->dev = dev;
		t->timed = timed;
	}
}

// kernel_issue_ns is the kernel's own issue stamp of the request, or 0. The
// kernel zeroes it when it sets a request up and stamps it in
// blk_mq_start_request, right after the block_rq_issue tracepoint, only on
// queues that collect I/O statistics.
static __always_inline __u64 kernel_issue_ns(struct request *rq)
{
	if (!bpf_core_field_exists(rq->io_start_time_ns))
		return 0;
	return rq->io_start_time_ns;
}

static __always_inline __u32 log2_u32(__u32 v)
{
	__u32 r, shift;

	r = (v > 0xFFFF) << 4; v >>= r;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 hi = v >> 32;
	if (hi)
		return log2_u32(hi) + 32;
	return log2_u32(v);
}

static __always_inline __u32 latency_slot(__u64 ns)
{
	__u64 us = ns / 1000;
	if (us == 0)
		return 0;
	__u32 slot = log2_u64(us) + 1;
	return slot < LATENCY_SLOTS - 1 ? slot : LATENCY_SLOTS - 1;
}

// owner_slot_of returns the slot a request maps to, from what tells the
// requests in flight apart: disk, hardware queue and tag (the scheduler's
// tag where there is one, as the driver's is given only at dispatch). The
// verifier allows no arithmetic on the request's address itself.
static __always_inline struct owner_slot *owner_slot_of(struct request *rq)
{
	int tag = rq->internal_tag >= 0 ? rq->internal_tag : rq->tag;
	struct blk_mq_hw_ctx *hctx = rq->mq_hctx;
	__u32 queue = hctx ? hctx->queue_num : 0;
	__u32 i = (request_dev(rq) * 2654435761u) ^ (queue << 16) ^ ((__u32)tag * 40503u);
	i &= OWNER_SLOTS - 1;
	return bpf_map_lookup_elem(&owner_slots, &i);
}

// forget_owner drops what a request pointer left behind when its request
// went away without completing (merged into another).
static __always_inline void forget_owner(struct request *rq)
{
	__u64 key = (__u64)rq;
	struct owner_slot *o = owner_slot_of(rq);
	if (o && o->rq == key)
		__sync_val_compare_and_swap(&o->rq, key, 0);
	bpf_map_delete_elem(&request_starts, &key);
}

static __always_inline void record_owner(struct request *rq)
{
	__u64 key = (__u64)rq;
	__u32 tgid;
	struct tracked_process *t = current_tracked(&tgid);

	if (!t) {
		// The pointer may be reused from a request that was merged
		// into another and never completed: forget its owner.
		if (!forget_on_merge)
			forget_owner(rq);
		return;
	}
	__u64 now = bpf_ktime_get_ns();
	struct owner_slot *o = owner_slot_of(rq);
	if (o) {
		// Free, or still held by this pointer's previous request
		// (merged away unseen): take it.
		__u64 held = __sync_val_compare_and_swap(&o->rq, 0, key);
		if (held == 0 || held == key) {
			o->owner_start_ns = now;
			o->owner = tgid;
			o->root = t->root;
			return;
		}
	}
	struct request_start s = {
		.owner_start_ns = now,
		.owner = tgid,
		.root = t->root,
	};
	if (bpf_map_update_elem(&request_starts, &key, &s, BPF_ANY))
		count_lost(LOST_REQUEST_TABLE_FULL);
}

SEC("tp_btf/block_io_start")
int BPF_PROG(block_io_start, struct request *rq)
{
	record_owner(rq);
	return 0;
}

SEC("fentry/blk_account_io_start")
int BPF_PROG(blk_account_io_start, struct request *rq)
{
	record_owner(rq);
	return 0;
}

SEC("tp_btf/block_rq_merge")
int BPF_PROG(block_rq_merge, struct request *rq)
{
	forget_owner(rq);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(block_rq_issue, struct request *rq)
{
	__u64 key = (__u64)rq;
	struct request_start n = {};

	if (owner_at_issue) {
		__u32 tgid;
		struct tracked_process *t = current_tracked(&tgid);
		if (t) {
			n.owner = tgid;
			n.root = t->root;
		}
	}
	// The kernel stamps this request itself: only an owner needs keeping,
	// and one recorded at creation is in the table already.
	if (!n.owner && is_kernel_timed(request_dev(rq)))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	n.issue_ns = now;
	if (n.owner)
		n.owner_start_ns = now;
	// Most requests have no entry yet: one insert, no lookup first.
	long err = bpf_map_update_elem(&request_starts, &key, &n, BPF_NOEXIST);
	if (err == -17 /* EEXIST */) {
		// Owner recorded at creation, or a requeued request issued
		// again: its service time restarts.
		struct request_start *s = bpf_map_lookup_elem(&request_starts, &key);
		if (s)
			s->issue_ns = now;
	} else if (err) {
		count_lost(LOST_REQUEST_TABLE_FULL);
	}
	return 0;
}

static __always_inline void count_latency(__u32 dev, __u32 op, __u64 ns)
{
	struct disk_key k = { .dev = dev, .op = op };
	struct disk_latency *h = bpf_map_lookup_elem(&disk_latencies, &k);

	if (!h) {
		struct disk_latency zero = {};
		bpf_map_update_elem(&disk_latencies, &k, &zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&disk_latencies, &k);
		if (!h) {
			count_lost(LOST_DISK_LATENCY_FULL);
			return;
		}
	}
	__u32 slot = latency_slot(ns);
	if (slot < LATENCY_SLOTS)
		h->slots[slot]++;
	h->sum_ns += ns;
}

static __always_inline struct process_io *process_io_entry(__u32 owner, __u32 root, __u32 dev, __u32 op)
{
	struct process_io_key k = { .tgid = owner, .dev = dev, .op = op };
	struct process_io *p = bpf_map_lookup_elem(&process_io_totals, &k);

	if (p)
		return p;
	struct process_io zero = { .root = root };
	bpf_map_update_elem(&process_io_totals, &k, &zero, BPF_NOEXIST);
	p = bpf_map_lookup_elem(&process_io_totals, &k);
	if (!p)
		count_lost(LOST_PROCESS_IO_FULL);
	return p;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	// A request completed in parts fires once per part; the last part
	// covers what is left of __data_len. Bytes count on every part, the
	// request and its latency once, at the end.
	bool final = nr_bytes >= rq->__data_len;
	struct request_start *s = bpf_map_lookup_elem(&request_starts, &key);
	struct owner_slot *o = owner_slot_of(rq);
	__u32 owner = 0, root = 0;
	__u64 owner_start_ns = 0;

	if (o && o->rq == key) {
		owner = o->owner;
		root = o->root;
		owner_start_ns = o->owner_start_ns;
	} else if (s && s->owner) {
		owner = s->owner;
		root = s->root;
		owner_start_ns = s->owner_start_ns;
	} else {
		o = NULL;
	}
	__u64 issued = kernel_issue_ns(rq);
	bool kernel_stamped = issued != 0;

	if (!kernel_stamped && s)
		issued = s->issue_ns;
	if (!issued && !owner) {
		if (final) {
			count_lost(LOST_REQUEST_UNMATCHED);
			if (s)
				bpf_map_delete_elem(&request_starts, &key);
			// Issued unrecorded because the disk was taken for
			// kernel-stamped: it no longer is.
			set_kernel_timed(request_dev(rq), 0);
		}
		return 0;
	}
	__u32 dev = request_dev(rq);
	__u32 op = request_op(rq);
	__u64 now = bpf_ktime_get_ns();

	if (owner) {
		struct process_io *p = process_io_entry(owner, root, dev, op);
		if (p) {
			__sync_fetch_and_add(&p->bytes, nr_bytes);
			if (final) {
				__sync_fetch_and_add(&p->requests, 1);
				__sync_fetch_and_add(&p->wait_ns, now - owner_start_ns);
			}
		}
	}
	if (!final)
		return 0;
	if (issued) {
		set_kernel_timed(dev, kernel_stamped);
		count_latency(dev, op, now - issued);
	} else {
		count_lost(LOST_REQUEST_UNMATCHED);
	}
	if (o)
		__sync_val_compare_and_swap(&o->rq, key, 0);
	if (s)
		bpf_map_delete_elem(&request_starts, &key);
	return 0;
}
