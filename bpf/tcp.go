package bpf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Scope says where a TCP connection's traffic goes.
type Scope uint32

// The values of enum tcp_scope in tcp.bpf.c.
const (
	// ScopeLoopback: both ends are loopback addresses, or both have the same
	// address, so the traffic never leaves the host.
	ScopeLoopback Scope = iota
	ScopeNetwork
)

// TCP owns the TCP programs and their table.
type TCP struct {
	coll  *ebpf.Collection
	maps  tcpMaps
	links []link.Link
	progs []program
	hook  TCPHook
}

// TCPHook names where TCP traffic is counted.
type TCPHook string

const (
	// TCPAtSocketCalls: the sock_send_length and sock_recv_length
	// tracepoints (Linux 6.3+), after every socket send and receive call.
	TCPAtSocketCalls TCPHook = "sock_send_length/sock_recv_length"
	// TCPAtTCPCalls: fexit on tcp_sendmsg and tcp_recvmsg (Linux 5.5+,
	// where the kernel allows BPF trampolines).
	TCPAtTCPCalls TCPHook = "tcp_sendmsg/tcp_recvmsg"
)

// TCPKey identifies one process's traffic in one scope.
type TCPKey struct {
	TGID  uint32
	Scope Scope
}

// TCPTraffic is the TCP payload a tracked process passed through send and
// receive calls in one scope, since it was tracked.
type TCPTraffic struct {
	TCPKey
	Root     uint32
	Sent     uint64
	Received uint64
}

// LoadTCP loads and attaches the TCP programs, counting the tracker's
// processes.
func LoadTCP(t *Tracker) (*TCP, error) {
	kernel, err := kernelBTF()
	if err != nil {
		return nil, err
	}
	type candidate struct {
		hook  TCPHook
		progs []string
	}
	var candidates []candidate
	var errs []error
	if hasTracepoint(kernel, "sock_send_length") && hasTracepoint(kernel, "sock_recv_length") {
		candidates = append(candidates, candidate{TCPAtSocketCalls, []string{"sock_send_length", "sock_recv_length"}})
	}
	// tcp_recvmsg with six parameters is a kernel before 5.19, which may
	// lack bpf_get_func_ret; with fewer, a later one, which has it.
	switch n := funcParams(kernel, "tcp_recvmsg"); {
	case funcParams(kernel, "tcp_sendmsg") != 3:
		errs = append(errs, errors.New("kernel's tcp_sendmsg is not traceable as tcp_sendmsg(sk, msg, size)"))
	case n == 6:
		candidates = append(candidates, candidate{TCPAtTCPCalls, []string{"tcp_sendmsg_exit", "tcp_recvmsg_exit_nonblock"}})
	case n == 4 || n == 5:
		candidates = append(candidates, candidate{TCPAtTCPCalls, []string{"tcp_sendmsg_exit", "tcp_recvmsg_exit"}})
	default:
		errs = append(errs, fmt.Errorf("kernel's tcp_recvmsg is not traceable (%d parameters)", n))
	}
	for _, cand := range candidates {
		c, err := loadTCPWith(t, cand.hook, cand.progs)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("at %s: %w", cand.hook, err))
	}
	return nil, errorHint("load TCP programs", errors.Join(errs...))
}

func loadTCPWith(t *Tracker, hook TCPHook, progs []string) (*TCP, error) {
	spec, err := loadTcp()
	if err != nil {
		return nil, err
	}
	for name := range spec.Programs {
		if !slices.Contains(progs, name) {
			delete(spec.Programs, name)
		}
	}
	c := &TCP{hook: hook}
	if c.coll, err = t.loadSharing(spec, &c.maps); err != nil {
		return nil, err
	}
	for _, name := range progs {
		c.progs = append(c.progs, program{name, c.coll.Programs[name]})
	}
	if c.links, err = attachAll(c.progs...); err != nil {
		c.coll.Close()
		return nil, err
	}
	return c, nil
}

// Hook says where TCP traffic is counted.
func (c *TCP) Hook() TCPHook { return c.hook }

// ProgramStats reports the TCP programs' runs and run time.
func (c *TCP) ProgramStats() ([]ProgramStats, error) { return programStats(c.progs) }

// RunsSkipped counts the runs of these programs the kernel skipped because
// the same program was already running on the CPU: events never seen.
func (c *TCP) RunsSkipped() (uint64, error) { return runsSkipped(c.progs) }

// ProgramIDs are the kernel's IDs of the programs this loaded: what tells
// them from the same programs loaded by another process.
func (c *TCP) ProgramIDs() ([]ebpf.ProgramID, error) { return programIDs(c.progs) }

// Traffic returns the tracked processes' TCP traffic, one entry per process
// and scope it used.
func (c *TCP) Traffic() ([]TCPTraffic, error) {
	var out []TCPTraffic
	err := entries(c.maps.TcpTraffic, "TCP traffic", func(tgid uint32, v tcpTcpTrafficBytes) {
		for _, scope := range []Scope{ScopeLoopback, ScopeNetwork} {
			if v.Sent[scope] == 0 && v.Received[scope] == 0 {
				continue
			}
			out = append(out, TCPTraffic{TCPKey: TCPKey{TGID: tgid, Scope: scope}, Root: v.Root, Sent: v.Sent[scope], Received: v.Received[scope]})
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ForgetTraffic removes the traffic of processes that exited, once counted:
// both scopes of each process named.
func (c *TCP) ForgetTraffic(keys []TCPKey) error {
	var tgids []uint32
	done := map[uint32]bool{}
	for _, k := range keys {
		if !done[k.TGID] {
			done[k.TGID] = true
			tgids = append(tgids, k.TGID)
		}
	}
	return deleteKeys(c.maps.TcpTraffic, tgids)
}

// TableFull is how many counts were lost because the TCP table was full.
func (c *TCP) TableFull() (uint64, error) {
	n, err := sumLost(c.maps.LostEvents, 1)
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// Close detaches the programs and frees the table.
func (c *TCP) Close() error {
	err := closeLinks(c.links)
	c.coll.Close()
	return err
}
