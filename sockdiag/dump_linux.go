//go:build linux

package sockdiag

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Dump passes every TCP socket a process can hold (IPv4 and IPv6, every
// state but TIME_WAIT and SYN_RECV) of the caller's network namespace to
// fn, with its tcp_info byte counters. fn must not keep the pointer. The
// dump streams: memory does not grow with the number of sockets. An error
// from fn stops the dump and is returned.
//
// A dump walks every bucket of the kernel's TCP hash table, whose size
// grows with the host's memory (a million buckets on a 128 GB host), empty
// or not, once per address family: milliseconds even with a handful of
// sockets. Lookup is the way to re-read known sockets.
func Dump(ctx context.Context, fn func(*Socket) error) (Stats, error) {
	fd, err := open()
	if err != nil {
		return Stats{}, err
	}
	defer unix.Close(fd)
	return dump(ctx, &netlinkConn{fd: fd}, fn)
}

// Lookup asks the kernel for each socket of ids by its ends and cookie, a
// hash lookup each instead of a walk of the table, and passes those it has
// to fn as Dump does; gone are the ones it no longer has (closed, or a new
// socket under the same ends).
func Lookup(ctx context.Context, ids []SocketID, fn func(*Socket) error) (Stats, []SocketID, error) {
	fd, err := open()
	if err != nil {
		return Stats{}, nil, err
	}
	defer unix.Close(fd)
	return lookup(ctx, &netlinkConn{fd: fd}, ids, fn)
}

func open() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, fmt.Errorf("sock_diag: opening a NETLINK_SOCK_DIAG socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sock_diag: binding the netlink socket: %w", err)
	}
	return fd, nil
}

// netlinkConn is the socket of one Dump or Lookup. timeoutFor is the
// deadline its receive timeout was last set for: set once per deadline, not
// once per datagram (a lookup of each of hundreds of sockets is a datagram
// each, and the setsockopt was a third of its system calls). A receive then
// waits at most the time that was left when it was set; the kernel answers
// a lookup before its request's send returns, so none waits in practice.
type netlinkConn struct {
	fd         int
	timeoutFor time.Time
}

func (c *netlinkConn) send(b []byte) error {
	return unix.Sendto(c.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

func (c *netlinkConn) recv(b []byte, deadline time.Time) (int, error) {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return 0, errTimeout
		}
		if !deadline.Equal(c.timeoutFor) {
			tv := unix.NsecToTimeval(max(left, time.Millisecond).Nanoseconds())
			if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				return 0, fmt.Errorf("setting the receive timeout: %w", err)
			}
			c.timeoutFor = deadline
		}
		n, _, flags, from, err := unix.Recvmsg(c.fd, b, nil, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, errTimeout
		case err != nil:
			return 0, err
		case flags&unix.MSG_TRUNC != 0:
			return 0, fmt.Errorf("datagram larger than the %d-byte buffer", len(b))
		}
		// Only the kernel (port 0) answers dumps; ignore anything else.
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue
		}
		return n, nil
	}
}
