//go:build linux

package sockdiag

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The codec spells the kernel's constants out to build everywhere; here they
// meet x/sys's, which are generated from the kernel headers.
func TestConstantsMatchKernelHeaders(t *testing.T) {
	for _, c := range []struct {
		name      string
		ours, sys int
	}{
		{"AF_INET", afINET, unix.AF_INET},
		{"AF_INET6", afINET6, unix.AF_INET6},
		{"IPPROTO_TCP", ipprotoTCP, unix.IPPROTO_TCP},
		{"NLMSG_HDRLEN", nlmsgHdrLen, unix.NLMSG_HDRLEN},
		{"sizeof(nlmsghdr)", nlmsgHdrLen, unix.SizeofNlMsghdr},
		{"NLMSG_ALIGNTO", nlmsgAlignTo, unix.NLMSG_ALIGNTO},
		{"NLA_ALIGNTO", nlaAlignTo, unix.NLA_ALIGNTO},
		{"NLA_HDRLEN", nlaHdrLen, unix.NLA_HDRLEN},
		{"NLMSG_NOOP", nlmsgNoop, unix.NLMSG_NOOP},
		{"NLMSG_ERROR", nlmsgError, unix.NLMSG_ERROR},
		{"NLMSG_DONE", nlmsgDone, unix.NLMSG_DONE},
		{"SOCK_DIAG_BY_FAMILY", sockDiagByFamily, unix.SOCK_DIAG_BY_FAMILY},
		{"NLM_F_REQUEST", nlmFRequest, unix.NLM_F_REQUEST},
		{"NLM_F_MULTI", nlmFMulti, unix.NLM_F_MULTI},
		{"NLM_F_DUMP_INTR", nlmFDumpIntr, unix.NLM_F_DUMP_INTR},
		{"NLM_F_DUMP", nlmFDump, unix.NLM_F_DUMP},
		{"tcp_info.bytes_acked", offTCPInfoBytesAcked, int(unsafe.Offsetof(unix.TCPInfo{}.Bytes_acked))},
		{"tcp_info.bytes_received", offTCPInfoBytesRecved, int(unsafe.Offsetof(unix.TCPInfo{}.Bytes_received))},
		{"tcp_info up to bytes_received", tcpInfoLenWithBytes, int(unsafe.Offsetof(unix.TCPInfo{}.Segs_out))},
		{"TCP_ESTABLISHED", int(Established), unix.BPF_TCP_ESTABLISHED},
		{"TCP_TIME_WAIT", int(TimeWait), unix.BPF_TCP_TIME_WAIT},
		{"TCP_LISTEN", int(Listen), unix.BPF_TCP_LISTEN},
		{"TCP_NEW_SYN_RECV", int(NewSynRecv), unix.BPF_TCP_NEW_SYN_RECV},
	} {
		if c.ours != c.sys {
			t.Errorf("%s: %d here, %d in the kernel headers", c.name, c.ours, c.sys)
		}
	}
}

// loopbackPair connects two TCP sockets over 127.0.0.1 and moves size bytes
// each way, then a one-byte ping-pong whose replies carry the ACKs of the
// bulk data, so that tcpi_bytes_acked covers it when this returns.
func loopbackPair(t *testing.T, size int) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	exchange(t, client, server, size)
	return client, server
}

// exchange sends size bytes from a to b and from b to a, then pings.
func exchange(t *testing.T, a, b *net.TCPConn, size int) {
	t.Helper()
	payload := bytes.Repeat([]byte{0x5a}, size)
	oneWay := func(from, to *net.TCPConn) {
		errc := make(chan error, 1)
		go func() { _, err := from.Write(payload); errc <- err }()
		if _, err := io.CopyN(io.Discard, to, int64(size)); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	oneWay(a, b)
	oneWay(b, a)
	oneWay1 := func(from, to *net.TCPConn) {
		if _, err := from.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(to, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	}
	oneWay1(a, b)
	oneWay1(b, a)
	oneWay1(a, b)
}

// On the running kernel: a loopback connection made here is listed with its
// byte counters, and its inodes are the ones in /proc/self/fd. Passes as
// root and unprivileged alike (run the test binary under
// setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all).
func TestDumpLive(t *testing.T) {
	const size = 10 << 20
	client, server := loopbackPair(t, size)
	cport := uint16(client.LocalAddr().(*net.TCPAddr).Port)
	sport := uint16(server.LocalAddr().(*net.TCPAddr).Port)
	var mine []Socket
	st, err := Dump(context.Background(), nil, func(s *Socket) error {
		if (s.Local.Port() == cport && s.Remote.Port() == sport) || (s.Local.Port() == sport && s.Remote.Port() == cport) {
			mine = append(mine, *s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Sockets < 2 || st.ShortInfo != 0 {
		t.Fatalf("stats %+v", st)
	}
	if len(mine) != 2 {
		t.Fatalf("found %d of the test's 2 sockets: %+v", len(mine), mine)
	}
	own, truncated, err := NewSocketTable("/proc", os.Getpid()).Inodes(0, false, nil)
	if err != nil || truncated {
		t.Fatalf("own descriptors: %v (truncated %v)", err, truncated)
	}
	for _, s := range mine {
		if s.State != Established || !s.Loopback() || !s.OnHost() || !s.HasByteCounters {
			t.Errorf("socket %+v", s)
		}
		if s.BytesAcked < size || s.BytesReceived < size {
			t.Errorf("%s -> %s: acked %d, received %d; want at least %d each way", s.Local, s.Remote, s.BytesAcked, s.BytesReceived, size)
		}
		if s.Inode == 0 || !slices.Contains(own, s.Inode) {
			t.Errorf("inode %d not among this process's sockets %v", s.Inode, own)
		}
		if s.UID != uint32(os.Getuid()) {
			t.Errorf("uid %d; want %d", s.UID, os.Getuid())
		}
	}
	t.Logf("uid %d: %d sockets in the namespace", os.Getuid(), st.Sockets)
}

// A connection closed here first leaves its client side in TIME_WAIT, which
// no descriptor holds: the dump leaves it out, and lists the listener that
// a process still holds.
func TestDumpLeavesTimeWaitOut(t *testing.T) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lport := uint16(ln.Addr().(*net.TCPAddr).Port)
	client, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	cport := uint16(client.LocalAddr().(*net.TCPAddr).Port)
	// The active closer goes through FIN_WAIT to TIME_WAIT once the peer
	// closes too; the peer's side is gone after its LAST_ACK.
	client.Close()
	if _, err := server.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("server read after client close: %v", err)
	}
	server.Close()
	sawListener := false
	var stale []Socket
	for range 50 {
		stale, sawListener = stale[:0], false
		if _, err := Dump(context.Background(), nil, func(s *Socket) error {
			switch {
			case s.Local.Port() == lport && s.State == Listen:
				sawListener = true
			case s.Local.Port() == cport:
				stale = append(stale, *s)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(stale) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond) // FIN_WAIT2 until the peer's FIN lands
	}
	if !sawListener {
		t.Error("the listener held by this process is not listed")
	}
	for _, s := range stale {
		t.Errorf("client side listed after close, in state %v", s.State)
	}
	if !timeWaitExists(t, cport) {
		t.Skip("the kernel shows no TIME_WAIT entry for the closed connection: nothing left out to check")
	}
}

// timeWaitExists tells whether /proc/net/tcp lists the local port in
// TIME_WAIT (state 06), the check that the dump had something to leave out.
func timeWaitExists(t *testing.T, port uint16) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skip(err)
	}
	want := fmt.Sprintf(":%04X ", port)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1]+" ", want) && f[3] == "06" {
			return true
		}
	}
	return false
}

// The kernel runs the port filter: of three loopback connections and a
// listener, a dump for one connection's client side and the listener lists
// exactly those two, and a program for MaxPortPairs pairs is accepted.
func TestDumpFiltersByPorts(t *testing.T) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lport := uint16(ln.Addr().(*net.TCPAddr).Port)
	var clients []*net.TCPConn
	for range 3 {
		c, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		clients = append(clients, c)
	}
	port := func(a net.Addr) uint16 { return uint16(a.(*net.TCPAddr).Port) }
	want := PortPair{Local: port(clients[1].LocalAddr()), Remote: lport}
	only := []PortPair{{Local: 1, Remote: 2}, want, {Local: lport}}
	var got []PortPair
	st, err := Dump(context.Background(), only, func(s *Socket) error {
		got = append(got, PortPair{Local: s.Local.Port(), Remote: s.Remote.Port()})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b PortPair) int { return int(a.Local) - int(b.Local) })
	wantAll := []PortPair{want, {Local: lport}}
	slices.SortFunc(wantAll, func(a, b PortPair) int { return int(a.Local) - int(b.Local) })
	if !slices.Equal(got, wantAll) || !st.Filtered || st.Sockets != 2 {
		t.Fatalf("filtered dump listed %v (stats %+v); want %v", got, st, wantAll)
	}

	many := make([]PortPair, MaxPortPairs)
	for i := range many {
		many[i] = PortPair{Local: uint16(1 + i), Remote: 9}
	}
	many[len(many)-1] = want
	got = got[:0]
	if _, err := Dump(context.Background(), many, func(s *Socket) error {
		got = append(got, PortPair{Local: s.Local.Port(), Remote: s.Remote.Port()})
		return nil
	}); err != nil {
		t.Fatalf("%d pairs: %v", len(many), err)
	}
	if !slices.Equal(got, []PortPair{want}) {
		t.Fatalf("%d pairs, the last one a connection: listed %v", len(many), got)
	}
	if _, err := Dump(context.Background(), make([]PortPair, MaxPortPairs+1), func(*Socket) error { return nil }); err == nil {
		t.Error("more than MaxPortPairs pairs accepted")
	}
}
