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
	st, err := Dump(context.Background(), func(s *Socket) error {
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
	// FIN_WAIT2 until the peer's FIN lands; the guard only stops a hang.
	for guard := time.Now().Add(30 * time.Second); ; {
		stale, sawListener = stale[:0], false
		if _, err := Dump(context.Background(), func(s *Socket) error {
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
		if len(stale) == 0 || stale[0].State == TimeWait || time.Now().After(guard) {
			break
		}
		time.Sleep(20 * time.Millisecond)
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

// Lookup finds each socket by its ends and cookie: of three loopback
// connections and a listener, the listener and one connection's two ends
// come back with their counters; a socket reset since and a stale cookie
// are gone.
func TestLookupLive(t *testing.T) {
	ln, conns := loopbackPairs(t, 3)
	lport := uint16(ln.Addr().(*net.TCPAddr).Port)
	exchange(t, conns[2], conns[3], 4096)
	ports := map[uint16]bool{lport: true}
	for _, c := range conns {
		ports[uint16(c.LocalAddr().(*net.TCPAddr).Port)] = true
	}
	byPorts := map[[2]uint16]SocketID{}
	if _, err := Dump(context.Background(), func(s *Socket) error {
		if ports[s.Local.Port()] && (s.Remote.Port() == 0 || ports[s.Remote.Port()]) {
			byPorts[[2]uint16{s.Local.Port(), s.Remote.Port()}] = s.ID()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	id := func(c *net.TCPConn) SocketID {
		return byPorts[[2]uint16{uint16(c.LocalAddr().(*net.TCPAddr).Port), uint16(c.RemoteAddr().(*net.TCPAddr).Port)}]
	}
	listener := byPorts[[2]uint16{lport, 0}]
	closed := id(conns[4])
	stale := id(conns[1])
	stale.Cookie++
	// Reset, not closed: a closed socket lives on in FIN_WAIT, and the
	// kernel still has it.
	if err := conns[4].SetLinger(0); err != nil {
		t.Fatal(err)
	}
	conns[4].Close()
	want := []SocketID{listener, id(conns[2]), id(conns[3])}
	var got []SocketID
	var acked uint64
	st, gone, err := Lookup(context.Background(), append(slices.Clone(want), closed, stale), func(s *Socket) error {
		got = append(got, s.ID())
		if s.ID() == id(conns[2]) {
			acked = s.BytesAcked
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || st.Sockets != 3 {
		t.Errorf("looked up %v (stats %+v); want %v", got, st, want)
	}
	if !slices.Equal(gone, []SocketID{closed, stale}) {
		t.Errorf("gone %v; want the closed %v and the stale %v", gone, closed, stale)
	}
	if acked < 4096 {
		t.Errorf("looked-up socket acked %d bytes; want at least the 4096 sent", acked)
	}
}

// loopbackPairs opens a loopback listener and n connections to it, and
// returns the listener and the connections' ends, client then server, all
// closed when the test ends.
func loopbackPairs(tb testing.TB, n int) (*net.TCPListener, []*net.TCPConn) {
	tb.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	var conns []*net.TCPConn
	for range n {
		c, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		s, err := ln.AcceptTCP()
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		conns = append(conns, c, s)
	}
	return ln, conns
}

// benchConns opens n loopback connections and returns the ids of their 2n
// sockets, as a dump gives them.
func benchConns(b *testing.B, n int) []SocketID {
	b.Helper()
	ln, conns := loopbackPairs(b, n)
	ports := map[uint16]bool{}
	for i := 0; i < len(conns); i += 2 {
		ports[uint16(conns[i].LocalAddr().(*net.TCPAddr).Port)] = true
	}
	lport := uint16(ln.Addr().(*net.TCPAddr).Port)
	var ids []SocketID
	if _, err := Dump(context.Background(), func(s *Socket) error {
		if (ports[s.Local.Port()] && s.Remote.Port() == lport) || (s.Local.Port() == lport && ports[s.Remote.Port()]) {
			ids = append(ids, s.ID())
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if len(ids) != 2*n {
		b.Fatalf("%d of the %d sockets listed", len(ids), 2*n)
	}
	return ids
}

// What the tcp collector pays each second for 32 known sockets: a dump of
// the namespace (a walk of every bucket of the kernel's TCP table, which
// grows with the host's memory) against a lookup of each.
func BenchmarkDump32(b *testing.B) {
	benchConns(b, 16)
	for b.Loop() {
		if _, err := Dump(context.Background(), func(*Socket) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookup32(b *testing.B) {
	ids := benchConns(b, 16)
	for b.Loop() {
		st, gone, err := Lookup(context.Background(), ids, func(*Socket) error { return nil })
		if err != nil || len(gone) > 0 || st.Sockets != len(ids) {
			b.Fatal(st, gone, err)
		}
	}
}

// IPv6 sockets, and IPv4 peers of a dual-stack listener (IPv4-mapped
// addresses on an AF_INET6 socket), are found by their ends too.
func TestLookupIPv6(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv6unspecified})
	if err != nil {
		t.Skipf("no IPv6 listener: %v", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	var conns []*net.TCPConn
	for _, ip := range []net.IP{net.IPv6loopback, net.IPv4(127, 0, 0, 1)} {
		c, err := net.DialTCP("tcp", nil, &net.TCPAddr{IP: ip, Port: port})
		if err != nil {
			t.Skipf("dialing %v: %v", ip, err)
		}
		defer c.Close()
		s, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		conns = append(conns, s) // the listener's side: an AF_INET6 socket
	}
	want := map[uint16]bool{}
	for _, c := range conns {
		want[uint16(c.RemoteAddr().(*net.TCPAddr).Port)] = true
	}
	var ids []SocketID
	if _, err := Dump(context.Background(), func(s *Socket) error {
		if s.Local.Port() == uint16(port) && want[s.Remote.Port()] {
			ids = append(ids, s.ID())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("the dump listed %d of the listener's 2 connections: %v", len(ids), ids)
	}
	var got []SocketID
	_, gone, err := Lookup(context.Background(), ids, func(s *Socket) error { got = append(got, s.ID()); return nil })
	if err != nil || len(gone) > 0 || !slices.Equal(got, ids) {
		t.Fatalf("looked up %v, gone %v, %v; want %v", got, gone, err, ids)
	}
}

// Lookups go lookupBatch to a send, and the kernel answers each in turn: the
// 60 ends of 30 connections, every fifth connection reset before the lookup
// (both its ends gone), come back in order across four sends, the reset ones
// gone, the others found once each.
func TestLookupLiveBatches(t *testing.T) {
	_, conns := loopbackPairs(t, 30)
	ends := func(c *net.TCPConn) [2]uint16 {
		return [2]uint16{uint16(c.LocalAddr().(*net.TCPAddr).Port), uint16(c.RemoteAddr().(*net.TCPAddr).Port)}
	}
	byEnds := map[[2]uint16]SocketID{}
	want := map[[2]uint16]bool{}
	for _, c := range conns {
		want[ends(c)] = true
	}
	if _, err := Dump(context.Background(), func(s *Socket) error {
		if e := [2]uint16{s.Local.Port(), s.Remote.Port()}; want[e] {
			byEnds[e] = s.ID()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var ids, wantGone, wantFound []SocketID
	for i, c := range conns {
		id, ok := byEnds[ends(c)]
		if !ok {
			t.Fatalf("the dump did not list %v", ends(c))
		}
		ids = append(ids, id)
		if pair := i / 2; pair%5 == 2 {
			if i%2 == 0 { // the client resets, the server gets the RST
				if err := c.SetLinger(0); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			wantGone = append(wantGone, id)
		} else {
			wantFound = append(wantFound, id)
		}
	}
	if len(ids) <= 3*lookupBatch {
		t.Fatalf("%d sockets do not fill three sends of %d", len(ids), lookupBatch)
	}
	var found []SocketID
	_, gone, err := Lookup(context.Background(), ids, func(s *Socket) error {
		found = append(found, s.ID())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(found, wantFound) || !slices.Equal(gone, wantGone) {
		t.Fatalf("found %d, gone %d; want %d found and %d gone, in order\nfound %v\ngone %v", len(found), len(gone), len(wantFound), len(wantGone), found, gone)
	}
}
