//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// TCP payload the tracked processes hand to the kernel and read from it, per
// process and scope: traffic that stays on the host or crosses the network.
// Counted where the bytes cross the process's system call, so a process is
// charged for exactly what it moved, with no socket table to poll. The
// sock_send_length and sock_recv_length tracepoints (Linux 6.3+) see every
// socket call; older kernels get fexit programs on tcp_sendmsg and
// tcp_recvmsg.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "tracking.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define SOCK_STREAM 1
#define MSG_PEEK 2

enum tcp_scope {
	TCP_SCOPE_HOST = 0,    // both ends loopback, or both on one address
	TCP_SCOPE_NETWORK = 1, // the rest
};

enum tcp_lost_reason {
	LOST_TCP_TABLE_FULL = 0,
};

struct tcp_traffic_bytes {
	__u32 root;
	__u32 reserved;
	__u64 sent[2];     // by enum tcp_scope
	__u64 received[2]; // by enum tcp_scope
};

// tcp_traffic: tgid -> the cumulative bytes of a tracked process, both
// scopes in one entry, so that a call of a process already counted costs
// one hash lookup: the tracked-process table is asked only when the
// process has no entry yet. An entry outlives its process's tracking until
// user space, which counts it a last time, removes it.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TRACKED_PROCESSES);
	__type(key, __u32);
	__type(value, struct tcp_traffic_bytes);
} tcp_traffic SEC(".maps");

static __always_inline bool ipv6_loopback(const __u32 a[4])
{
	// ::1, or IPv4-mapped 127.0.0.0/8
	if (a[0] != 0 || a[1] != 0)
		return false;
	if (a[2] == 0)
		return a[3] == bpf_htonl(1);
	return a[2] == bpf_htonl(0xffff) && (bpf_ntohl(a[3]) >> 24) == 127;
}

// sock_scope follows sockdiag's Socket.OnHost: a connection stays on the
// host when both ends are loopback addresses or both have the same address
// (a process connecting to the host's own address, which the kernel routes
// through lo).
// The socket is a BTF-typed argument in every program here, so its fields
// are read with plain loads rather than bpf_probe_read_kernel calls: this
// runs on every send and receive call of the node.
static __always_inline __u32 sock_scope(struct sock *sk)
{
	__u16 family = sk->__sk_common.skc_family;

	if (family == AF_INET) {
		__u32 local = sk->__sk_common.skc_rcv_saddr;
		__u32 remote = sk->__sk_common.skc_daddr;
		if ((bpf_ntohl(local) >> 24) == 127 && (bpf_ntohl(remote) >> 24) == 127)
			return TCP_SCOPE_HOST;
		return local != 0 && local == remote ? TCP_SCOPE_HOST : TCP_SCOPE_NETWORK;
	}
	if (family == AF_INET6) {
		__u32 local[4], remote[4];
		for (int i = 0; i < 4; i++) {
			local[i] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[i];
			remote[i] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[i];
		}
		if (ipv6_loopback(local) && ipv6_loopback(remote))
			return TCP_SCOPE_HOST;
		bool unspecified = !(local[0] | local[1] | local[2] | local[3]);
		bool same = local[0] == remote[0] && local[1] == remote[1] &&
			    local[2] == remote[2] && local[3] == remote[3];
		return !unspecified && same ? TCP_SCOPE_HOST : TCP_SCOPE_NETWORK;
	}
	return TCP_SCOPE_NETWORK;
}

static __always_inline void count_tcp(struct sock *sk, int bytes, bool sent)
{
	if (bytes <= 0)
		return;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!maybe_tracked(tgid))
		return;
	struct tcp_traffic_bytes *b = bpf_map_lookup_elem(&tcp_traffic, &tgid);
	if (!b) {
		struct tracked_process *t = bpf_map_lookup_elem(&tracked_processes, &tgid);
		if (!t)
			return;
		struct tcp_traffic_bytes zero = { .root = t->root };
		bpf_map_update_elem(&tcp_traffic, &tgid, &zero, BPF_NOEXIST);
		b = bpf_map_lookup_elem(&tcp_traffic, &tgid);
		if (!b) {
			count_lost(LOST_TCP_TABLE_FULL);
			return;
		}
	}
	__u32 scope = sock_scope(sk) & 1;
	if (sent)
		__sync_fetch_and_add(&b->sent[scope], bytes);
	else
		__sync_fetch_and_add(&b->received[scope], bytes);
}

static __always_inline bool is_tcp(struct sock *sk)
{
	return sk && sk->sk_protocol == IPPROTO_TCP && sk->sk_type == SOCK_STREAM;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send_length, struct sock *sk, int ret, int flags)
{
	if (ret > 0 && is_tcp(sk))
		count_tcp(sk, ret, true);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv_length, struct sock *sk, int ret, int flags)
{
	// A peek leaves the data to be read again.
	if (ret > 0 && !(flags & MSG_PEEK) && is_tcp(sk))
		count_tcp(sk, ret, false);
	return 0;
}

SEC("fexit/tcp_sendmsg")
int BPF_PROG(tcp_sendmsg_exit, struct sock *sk, struct msghdr *msg, size_t size, int ret)
{
	count_tcp(sk, ret, true);
	return 0;
}

// tcp_recvmsg's parameters changed twice (nonblock dropped in Linux 5.19,
// addr_len later), so the return value is fetched with bpf_get_func_ret
// (5.17+) wherever it stands; the loader uses the variant with the six
// explicit parameters on kernels older than that.
SEC("fexit/tcp_recvmsg")
int BPF_PROG(tcp_recvmsg_exit, struct sock *sk)
{
	__u64 ret;
	if (bpf_get_func_ret(ctx, &ret))
		return 0;
	count_tcp(sk, (int)ret, false);
	return 0;
}

SEC("fexit/tcp_recvmsg")
int BPF_PROG(tcp_recvmsg_exit_nonblock, struct sock *sk, struct msghdr *msg, size_t len,
	     int nonblock, int flags, int *addr_len, int ret)
{
	count_tcp(sk, ret, false);
	return 0;
}
