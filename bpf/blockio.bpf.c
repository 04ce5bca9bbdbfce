//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// Block request latency per disk and operation, and the block I/O of the
// tracked processes. A request is timed from its issue to the driver to its
// final block_rq_complete, as biolatency does, so the histogram is the
// device's service time. Most disks get the issue time from the kernel
// itself (io_start_time_ns, stamped on every queue with I/O statistics
// callbacks, writeback throttling's among them), and then a request of an
// untracked process costs one program with no hash lookup: the completion,
// which reads the stamp and counts into a per-CPU array. A disk whose
// requests complete unstamped is listed, user space then attaches
// block_rq_issue, and that disk's issue times are kept in request_starts.
// The tracked processes' requests are attributed to the process that
// created them, recorded where the kernel builds the request from the
// process's bio (block_io_start, Linux 6.5+; blk_account_io_start before)
// or, on kernels with neither, at issue time; their wait runs from the
// request's creation to its completion, queueing included.
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

// Set by tests only: every request is taken for one without the kernel's
// issue stamp, so that the path of disks without it runs on any disk.
const volatile __u8 kernel_stamps_ignored = 0;

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
	// attached, of a disk without the kernel's issue stamp before
	// block_rq_issue was attached for it, or whose issue found
	// request_starts full.
	LOST_REQUEST_UNMATCHED = 0,
	LOST_DISK_LATENCY_FULL = 1,
	LOST_PROCESS_IO_FULL = 2,
	LOST_REQUEST_TABLE_FULL = 3,
};

// What a completion needs to know before it looks in request_starts, which
// holds only the issue times of disks the kernel does not stamp and the
// owners that found their owner slot taken: on most nodes it is empty, and
// a completion then costs no hash lookup. One entry, read by every
// completion and written only when a disk or a spilled owner is added or
// an owner removed, so that its cache line stays shared.
struct blockio_state {
	__u64 unstamped_disks; // disks in unstamped_disks
	__u64 spilled_owners;  // owners in request_starts
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct blockio_state);
} blockio_states SEC(".maps");

struct request_start {
	__u64 owner_start_ns; // when the owner was recorded; 0 for no owner
	__u64 issue_ns;       // 0 until issued
	__u32 owner;          // tgid of a tracked process, or 0
	__u32 root;
};

// request_starts: request pointer -> request_start, for requests in flight
// that the kernel does not stamp at issue, and for owners that found their
// owner slot taken. 16384 entries cover 16 NVMe drives with 1024 requests in
// flight each. An entry is removed at completion; one of a request merged
// into another before issue, at the merge (block_rq_merge) or, where the
// kernel lacks that tracepoint, when its pointer is reused. A request that
// finds the table full goes unmeasured and is counted lost.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct request_start);
} request_starts SEC(".maps");

// unstamped_disks lists the disks whose requests complete without the
// kernel's issue stamp (io_start_time_ns, kept on every queue with I/O
// statistics callbacks, writeback throttling's among them: most disks).
// User space attaches block_rq_issue once the first one is listed, and it
// times their requests in request_starts. Open addressing by device number
// with PROBES probes; a disk is never removed, so an empty slot ends a
// search.
#define UNSTAMPED_SLOTS 64
#define PROBES 4

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UNSTAMPED_SLOTS);
	__type(key, __u32);
	__type(value, __u64); // device number; 0 for a free slot
} unstamped_disks SEC(".maps");

// owner_slots holds the owner of a tracked process's request in flight,
// direct-mapped by disk, hardware queue and tag, and claimed with a
// compare-and-swap: a request of a GPU job costs an array lookup and a few
// stores instead of a hash insert and delete under the table's bucket lock.
// A request whose slot is taken (a request of another queue maps there)
// goes to request_starts. 16384 slots hold the in-flight requests of many
// busy jobs with few collisions.
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

// disk_key names a histogram to user space; the programs keep it inside
// the histogram.
struct disk_key {
	__u32 dev; // kernel dev_t of the whole disk: major << 20 | minor
	__u32 op;  // enum disk_op
};

struct disk_latency {
	struct disk_key key; // dev 0 for a free slot
	__u64 slots[LATENCY_SLOTS];
	__u64 sum_ns;
};

// disk_latencies: one histogram per disk and operation, per CPU so that
// completions on many CPUs never contend, in an array probed by open
// addressing because array lookups are inlined by the verifier, where a
// hash lookup is a function call on every request of the node. Each CPU
// places a histogram in its own copy of the array, so user space adds the
// copies up by the key kept in each slot, reading only the slots
// disk_latency_used marks. 128 slots hold 32 disks doing reads, writes,
// flushes and discards.
#define DISK_LATENCY_SLOTS 128

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DISK_LATENCY_SLOTS);
	__type(key, __u32);
	__type(value, struct disk_latency);
} disk_latencies SEC(".maps");

// disk_latency_used: a bit per slot of disk_latencies that some CPU holds a
// histogram in, set once per slot and CPU.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DISK_LATENCY_SLOTS / 64);
	__type(key, __u32);
	__type(value, __u64);
} disk_latency_used SEC(".maps");

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

static __always_inline __u32 request_op_raw(struct request *rq)
{
	return rq->cmd_flags & 0xff; // REQ_OP_MASK
}

static __always_inline __u32 request_op(__u32 raw)
{
	switch (raw) {
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

// never_stamped says whether the kernel leaves this request unstamped on
// every disk, so that its completion says nothing of the disk: a
// driver-private request (SG_IO, NVMe passthrough), or one completed
// without ever being issued, as the flush machinery completes fsync's empty
// write (issuing a flush request of its own, which is timed).
static __always_inline bool never_stamped(struct request *rq, __u32 raw_op)
{
	if (raw_op == REQ_OP_DRV_IN || raw_op == REQ_OP_DRV_OUT)
		return true;
	return bpf_core_field_exists(rq->state) && rq->state == MQ_RQ_IDLE;
}

static __always_inline struct blockio_state *state(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&blockio_states, &zero);
}

static __always_inline __u32 disk_hash(__u32 dev)
{
	return dev * 2654435761u;
}

// is_unstamped says whether the disk was found to complete requests
// without the kernel's issue stamp.
static __always_inline bool is_unstamped(__u32 dev)
{
	__u32 first = disk_hash(dev) >> 16;
	for (int p = 0; p < PROBES; p++) {
		__u32 i = (first + p) & (UNSTAMPED_SLOTS - 1);
		__u64 *d = bpf_map_lookup_elem(&unstamped_disks, &i);
		if (!d || *d == 0)
			return false;
		if (*d == dev)
			return true;
	}
	return false;
}

// mark_unstamped lists the disk in unstamped_disks, once.
static __always_inline void mark_unstamped(__u32 dev)
{
	__u32 first = disk_hash(dev) >> 16;
	for (int p = 0; p < PROBES; p++) {
		__u32 i = (first + p) & (UNSTAMPED_SLOTS - 1);
		__u64 *d = bpf_map_lookup_elem(&unstamped_disks, &i);
		if (!d)
			return;
		__u64 held = *d;
		if (held == 0)
			held = __sync_val_compare_and_swap(d, 0, (__u64)dev);
		if (held == 0) {
			struct blockio_state *st = state();
			if (st)
				__sync_fetch_and_add(&st->unstamped_disks, 1);
			return;
		}
		if (held == dev)
			return;
	}
	count_lost(LOST_DISK_LATENCY_FULL);
}

// kernel_issue_ns is the kernel's own issue stamp of the request, or 0. The
// kernel zeroes it when it sets a request up and stamps it in
// blk_mq_start_request, right after the block_rq_issue tracepoint, only on
// queues that collect I/O statistics.
static __always_inline __u64 kernel_issue_ns(struct request *rq)
{
	if (kernel_stamps_ignored || !bpf_core_field_exists(rq->io_start_time_ns))
		return 0;
	return rq->io_start_time_ns;
}

// owner_start_ns is when the request was created: the kernel's own stamp
// where it keeps one (on queues with I/O accounting or a scheduler), saving
// a clock read, and now otherwise.
static __always_inline __u64 owner_start_ns(struct request *rq)
{
	__u64 t = 0;
	if (bpf_core_field_exists(rq->start_time_ns))
		t = rq->start_time_ns;
	return t ? t : bpf_ktime_get_ns();
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
// tag where there is one, as the driver's is given only at dispatch). Each
// disk and queue gets its own offset, so that the tags of one queue never
// collide with each other. The verifier allows no arithmetic on the
// request's address itself.
static __always_inline struct owner_slot *owner_slot_of(struct request *rq, __u32 dev)
{
	int tag = rq->internal_tag >= 0 ? rq->internal_tag : rq->tag;
	struct blk_mq_hw_ctx *hctx = rq->mq_hctx;
	__u32 queue = hctx ? hctx->queue_num : 0;
	__u32 offset = (disk_hash(dev) ^ (queue * 0x85ebca6bu)) >> 12;
	__u32 i = (offset + (__u32)tag) & (OWNER_SLOTS - 1);
	return bpf_map_lookup_elem(&owner_slots, &i);
}

// drop_spilled removes a request's entry from request_starts, keeping the
// count of spilled owners true. The delete fails with EBUSY when this CPU
// was interrupted inside an update of the same bucket (a completion's
// interrupt landing in an issue): the entry is then emptied in place, so
// that it times and charges nothing, and the pointer's next request
// reuses it.
static __always_inline void drop_spilled(__u64 key, struct request_start *s)
{
	bool owned = s->owner != 0;
	long err = bpf_map_delete_elem(&request_starts, &key);
	if (err == -16 /* EBUSY */) {
		s->issue_ns = 0;
		s->owner = 0;
		s->owner_start_ns = 0;
		err = 0;
	}
	if (err == 0 && owned) {
		struct blockio_state *st = state();
		if (st)
			__sync_fetch_and_add(&st->spilled_owners, -1);
	}
}

// forget_owner drops what a request pointer left behind when its request
// went away without completing (merged into another).
static __always_inline void forget_owner(struct request *rq)
{
	__u64 key = (__u64)rq;
	struct owner_slot *o = owner_slot_of(rq, request_dev(rq));
	if (o && o->rq == key)
		__sync_val_compare_and_swap(&o->rq, key, 0);
	struct blockio_state *st = state();
	if (!st || !st->spilled_owners)
		return;
	struct request_start *s = bpf_map_lookup_elem(&request_starts, &key);
	if (s)
		drop_spilled(key, s);
}

// spill_owner keeps the owner of a request whose owner slot is taken in
// request_starts.
static __always_inline void spill_owner(__u64 key, __u32 tgid, __u32 root, __u64 start)
{
	struct request_start *s = bpf_map_lookup_elem(&request_starts, &key);
	if (s) {
		// Issued already (owner taken at issue, of a disk timed here),
		// or a stale owner of the pointer's last request.
		if (!s->owner) {
			struct blockio_state *st = state();
			if (st)
				__sync_fetch_and_add(&st->spilled_owners, 1);
		}
		s->owner_start_ns = start;
		s->owner = tgid;
		s->root = root;
		return;
	}
	struct request_start n = { .owner_start_ns = start, .owner = tgid, .root = root };
	if (bpf_map_update_elem(&request_starts, &key, &n, BPF_NOEXIST)) {
		count_lost(LOST_REQUEST_TABLE_FULL);
		return;
	}
	struct blockio_state *st = state();
	if (st)
		__sync_fetch_and_add(&st->spilled_owners, 1);
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
	__u64 start = owner_start_ns(rq);
	struct owner_slot *o = owner_slot_of(rq, request_dev(rq));
	if (o) {
		// Free, or still held by this pointer's previous request
		// (merged away unseen): take it.
		__u64 held = __sync_val_compare_and_swap(&o->rq, 0, key);
		if (held == 0 || held == key) {
			o->owner_start_ns = start;
			o->owner = tgid;
			o->root = t->root;
			return;
		}
	}
	spill_owner(key, tgid, t->root, start);
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

// block_rq_issue is attached only where it has work: once a disk without
// the kernel's issue stamp is listed, or to take owners at issue.
SEC("tp_btf/block_rq_issue")
int BPF_PROG(block_rq_issue, struct request *rq)
{
	if (owner_at_issue)
		record_owner(rq);
	if (!is_unstamped(request_dev(rq)))
		return 0;
	__u64 key = (__u64)rq;
	__u64 now = bpf_ktime_get_ns();
	struct request_start n = { .issue_ns = now };
	// Most requests have no entry yet: one insert, no lookup first.
	long err = bpf_map_update_elem(&request_starts, &key, &n, BPF_NOEXIST);
	if (err == -17 /* EEXIST */) {
		// A spilled owner, or a requeued request issued again: its
		// service time restarts.
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
	__u32 first = (disk_hash(dev) ^ (op * 0x9e3779b9u)) >> 16;
	for (int p = 0; p < PROBES; p++) {
		__u32 i = (first + p) & (DISK_LATENCY_SLOTS - 1);
		struct disk_latency *h = bpf_map_lookup_elem(&disk_latencies, &i);
		if (!h)
			return;
		if (h->key.dev == 0) {
			// This CPU's first request of the disk and operation
			// (no program nests on one CPU, so no other claims it).
			h->key.dev = dev;
			h->key.op = op;
			__u32 word = i / 64;
			__u64 *used = bpf_map_lookup_elem(&disk_latency_used, &word);
			__u64 bit = 1ULL << (i & 63);
			if (used && !(*used & bit))
				__sync_fetch_and_or(used, bit);
		} else if (h->key.dev != dev || h->key.op != op) {
			continue;
		}
		__u32 slot = latency_slot(ns);
		if (slot < LATENCY_SLOTS)
			h->slots[slot]++;
		h->sum_ns += ns;
		return;
	}
	count_lost(LOST_DISK_LATENCY_FULL);
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
	__u32 dev = request_dev(rq);
	if (!dev)
		return 0;
	__u64 issued = kernel_issue_ns(rq);
	// Fields are copied out where each pointer is checked: the verifier
	// must see the check beside the loads.
	__u32 owner = 0, root = 0;
	__u64 owner_start = 0;
	struct owner_slot *o = owner_slot_of(rq, dev);
	if (o && o->rq == key) {
		owner = o->owner;
		root = o->root;
		owner_start = o->owner_start_ns;
	}
	struct request_start *s = NULL;
	if (!issued || !owner) {
		// What is missing may be in request_starts, if anything is.
		struct blockio_state *st = state();
		if (st && ((!issued && st->unstamped_disks) || (!owner && st->spilled_owners)))
			s = bpf_map_lookup_elem(&request_starts, &key);
	}
	if (s && !owner && s->owner) {
		owner = s->owner;
		root = s->root;
		owner_start = s->owner_start_ns;
	}
	if (!issued && s)
		issued = s->issue_ns;
	__u32 raw_op = request_op_raw(rq);
	if (!issued && !owner) {
		if (final) {
			if (!never_stamped(rq, raw_op)) {
				count_lost(LOST_REQUEST_UNMATCHED);
				// A request that failed may never have been
				// started: only a success says the disk has no
				// stamp.
				if (!error)
					mark_unstamped(dev);
			}
			if (s)
				drop_spilled(key, s);
		}
		return 0;
	}
	__u32 op = request_op(raw_op);
	__u64 now = bpf_ktime_get_ns();

	if (owner) {
		struct process_io *p = process_io_entry(owner, root, dev, op);
		if (p) {
			__sync_fetch_and_add(&p->bytes, nr_bytes);
			if (final) {
				__sync_fetch_and_add(&p->requests, 1);
				__sync_fetch_and_add(&p->wait_ns, now > owner_start ? now - owner_start : 0);
			}
		}
	}
	if (!final)
		return 0;
	if (issued) {
		count_latency(dev, op, now > issued ? now - issued : 0);
	} else if (!never_stamped(rq, raw_op)) {
		count_lost(LOST_REQUEST_UNMATCHED);
		if (!error)
			mark_unstamped(dev);
	}
	// Only this request's completion frees its slot, and a held slot is
	// claimed by no other: a plain store, not a compare-and-swap.
	if (o && o->rq == key)
		o->rq = 0;
	if (s)
		drop_spilled(key, s);
	return 0;
}
