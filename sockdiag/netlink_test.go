package sockdiag

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The replies below are built field by field at the offsets documented in
// the kernel's UAPI headers (include/uapi/linux/netlink.h, inet_diag.h,
// tcp.h), written out here as numbers so that a wrong constant in the codec
// cannot hide behind the same constant in the test.

func littleEndianHost(t *testing.T) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("golden bytes are little-endian; netlink uses host byte order")
	}
}

// nlmsg is a netlink message: struct nlmsghdr {u32 len; u16 type; u16 flags;
// u32 seq; u32 pid} then the payload, padded to 4 bytes.
func nlmsg(typ, flags uint16, seq uint32, payload []byte) []byte {
	b := make([]byte, 16, 16+len(payload)+3)
	binary.LittleEndian.PutUint32(b[0:], uint32(16+len(payload)))
	binary.LittleEndian.PutUint16(b[4:], typ)
	binary.LittleEndian.PutUint16(b[6:], flags)
	binary.LittleEndian.PutUint32(b[8:], seq)
	binary.LittleEndian.PutUint32(b[12:], 4242) // our port id, as the kernel fills it
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nlattr is struct nlattr {u16 len; u16 type} then the payload, padded.
func nlattr(typ uint16, payload []byte) []byte {
	b := make([]byte, 4, 4+len(payload)+3)
	binary.LittleEndian.PutUint16(b[0:], uint16(4+len(payload)))
	binary.LittleEndian.PutUint16(b[2:], typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

type goldenSocket struct {
	family       uint8
	state        uint8
	src, dst     netip.Addr
	sport, dport uint16
	cookie       uint64
	uid, inode   uint32
	tcpInfo      []byte // nil: no INET_DIAG_INFO attribute
}

// inetDiagMsg is struct inet_diag_msg (72 bytes) with its attributes.
func (g goldenSocket) inetDiagMsg() []byte {
	b := make([]byte, 72)
	b[0], b[1], b[2], b[3] = g.family, g.state, 1, 0
	binary.BigEndian.PutUint16(b[4:], g.sport)
	binary.BigEndian.PutUint16(b[6:], g.dport)
	src, dst := g.src.AsSlice(), g.dst.AsSlice()
	copy(b[8:24], src)                                          // idiag_src[4]
	copy(b[24:40], dst)                                         // idiag_dst[4]
	binary.LittleEndian.PutUint32(b[40:], 0)                    // idiag_if
	binary.LittleEndian.PutUint32(b[44:], uint32(g.cookie))     // idiag_cookie[0]
	binary.LittleEndian.PutUint32(b[48:], uint32(g.cookie>>32)) // idiag_cookie[1]
	binary.LittleEndian.PutUint32(b[52:], 200)                  // idiag_expires
	binary.LittleEndian.PutUint32(b[56:], 0)                    // idiag_rqueue
	binary.LittleEndian.PutUint32(b[60:], 0)                    // idiag_wqueue
	binary.LittleEndian.PutUint32(b[64:], g.uid)
	binary.LittleEndian.PutUint32(b[68:], g.inode)
	// The kernel adds attributes we did not ask for; they must be skipped.
	b = append(b, nlattr(8, []byte{0, 0, 0, 0, 0x7f, 0, 0, 0})...) // INET_DIAG_SHUTDOWN-sized filler
	b = append(b, nlattr(19, []byte{6})...)                        // INET_DIAG_PROTOCOL
	if g.tcpInfo != nil {
		b = append(b, nlattr(2, g.tcpInfo)...) // INET_DIAG_INFO
	}
	return b
}

// tcpInfo is a struct tcp_info of the given length with tcpi_state at 0,
// tcpi_bytes_acked at 120 and tcpi_bytes_received at 128 when they fit.
func tcpInfo(length int, state uint8, acked, received uint64) []byte {
	b := make([]byte, length)
	b[0] = state
	binary.LittleEndian.PutUint32(b[8:], 204000) // tcpi_rto
	if length >= 136 {
		binary.LittleEndian.PutUint64(b[120:], acked)
		binary.LittleEndian.PutUint64(b[128:], received)
	}
	return b
}

const (
	nlmF_MULTI      = 0x2
	nlmF_DUMP_INTR  = 0x10
	typeDone        = 3
	typeError       = 2
	typeSockDiagFam = 20
)

// doneMsg is NLMSG_DONE with its int payload.
func doneMsg(seq uint32, code int32) []byte {
	p := make([]byte, 4)
	binary.LittleEndian.PutUint32(p, uint32(code))
	return nlmsg(typeDone, nlmF_MULTI, seq, p)
}

// errorMsg is NLMSG_ERROR: struct nlmsgerr {int error; struct nlmsghdr msg}.
func errorMsg(seq uint32, errno syscall.Errno) []byte {
	p := make([]byte, 20)
	binary.LittleEndian.PutUint32(p, uint32(-int32(errno)))
	binary.LittleEndian.PutUint32(p[4:], 72) // the request's header, echoed
	binary.LittleEndian.PutUint16(p[8:], typeSockDiagFam)
	binary.LittleEndian.PutUint32(p[12:], seq)
	return nlmsg(typeError, 0, seq, p)
}

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// scriptedConn answers each request with the datagrams its reply function
// builds for that request's sequence number and family; a send of several
// requests is answered request by request, as the kernel does.
type scriptedConn struct {
	reply   func(family uint8, seq uint32) [][]byte
	sent    [][]byte
	pending [][]byte
}

func (c *scriptedConn) send(b []byte) error {
	for len(b) >= 17 {
		n := int(binary.LittleEndian.Uint32(b))
		if n < 17 || n > len(b) {
			return fmt.Errorf("scripted: request length %d of %d bytes", n, len(b))
		}
		c.sent = append(c.sent, append([]byte(nil), b[:n]...))
		seq := binary.LittleEndian.Uint32(b[8:])
		c.pending = append(c.pending, c.reply(b[16], seq)...)
		b = b[nlmsgAlign(n):]
	}
	return nil
}

func (c *scriptedConn) recv(b []byte, _ time.Time) (int, error) {
	if len(c.pending) == 0 {
		return 0, errTimeout
	}
	d := c.pending[0]
	c.pending = c.pending[1:]
	return copy(b, d), nil
}

func collect(t *testing.T, c conn) ([]Socket, Stats, error) {
	t.Helper()
	var got []Socket
	st, err := dump(context.Background(), c, func(s *Socket) error {
		got = append(got, *s)
		return nil
	})
	return got, st, err
}

func TestEncodeRequest(t *testing.T) {
	littleEndianHost(t)
	got := encodeRequest(10, 0x01020304)
	want := "48000000" + // nlmsg_len 72
		"1400" + // SOCK_DIAG_BY_FAMILY
		"0103" + // NLM_F_REQUEST | NLM_F_DUMP (0x301)
		"04030201" + // seq
		"00000000" + // pid: the kernel
		"0a" + // sdiag_family AF_INET6
		"06" + // IPPROTO_TCP
		"02" + // idiag_ext: 1 << (INET_DIAG_INFO-1)
		"00" + // pad
		"b7efffff" + // idiag_states: all but TIME_WAIT (6), SYN_RECV (3), NEW_SYN_RECV (12)
		strings.Repeat("00", 48) // inet_diag_sockid: any
	if h := hex.EncodeToString(got); h != want {
		t.Fatalf("request\n got %s\nwant %s", h, want)
	}
}

// A dump arrives in several datagrams of several messages each and ends with
// NLMSG_DONE; one dump per family.
func TestDumpMultiPart(t *testing.T) {
	littleEndianHost(t)
	lo := netip.MustParseAddr("127.0.0.1")
	v4a, v4b := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")
	mapped := netip.MustParseAddr("::ffff:127.0.0.1")
	v6 := netip.MustParseAddr("fd00::5")
	established := goldenSocket{family: 2, state: 1, src: lo, dst: lo, sport: 40000, dport: 29500,
		cookie: 0x0000000100000002, uid: 1000, inode: 61001, tcpInfo: tcpInfo(232, 1, 10<<20, 5<<20)}
	network := goldenSocket{family: 2, state: 1, src: v4a, dst: v4b, sport: 45678, dport: 43001,
		cookie: 7, inode: 61002, tcpInfo: tcpInfo(248, 1, 1<<40, 3<<30)} // a newer kernel's longer tcp_info
	timeWait := goldenSocket{family: 2, state: 6, src: lo, dst: lo, sport: 40001, dport: 29500, cookie: 8}
	listen := goldenSocket{family: 10, state: 10, src: v6, dst: netip.IPv6Unspecified(), sport: 43000,
		cookie: 9, inode: 61004, tcpInfo: tcpInfo(136, 10, 0, 0)}
	dualStack := goldenSocket{family: 10, state: 1, src: mapped, dst: mapped, sport: 50000, dport: 29500,
		cookie: 10, inode: 61005, tcpInfo: tcpInfo(136, 1, 123, 456)}

	c := &scriptedConn{reply: func(family uint8, seq uint32) [][]byte {
		if family == 2 {
			return [][]byte{
				concat(nlmsg(typeSockDiagFam, nlmF_MULTI, seq, established.inetDiagMsg()),
					nlmsg(typeSockDiagFam, nlmF_MULTI, seq, network.inetDiagMsg())),
				concat(nlmsg(typeSockDiagFam, nlmF_MULTI, seq, timeWait.inetDiagMsg()), doneMsg(seq, 0)),
			}
		}
		return [][]byte{
			nlmsg(typeSockDiagFam, nlmF_MULTI, seq, listen.inetDiagMsg()),
			concat(nlmsg(typeSockDiagFam, nlmF_MULTI, seq, dualStack.inetDiagMsg()), doneMsg(seq, 0)),
		}
	}}
	got, st, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.sent) != 2 || c.sent[0][16] != 2 || c.sent[1][16] != 10 {
		t.Fatalf("requests: %x", c.sent)
	}
	if st.Sockets != 5 || st.ShortInfo != 0 || st.Interrupted {
		t.Fatalf("stats %+v", st)
	}
	want := []Socket{
		{State: Established, Local: netip.MustParseAddrPort("127.0.0.1:40000"), Remote: netip.MustParseAddrPort("127.0.0.1:29500"),
			Inode: 61001, Cookie: 0x0000000100000002, UID: 1000, HasInfo: true, HasByteCounters: true, BytesAcked: 10 << 20, BytesReceived: 5 << 20},
		{State: Established, Local: netip.MustParseAddrPort("10.0.0.5:45678"), Remote: netip.MustParseAddrPort("10.0.0.6:43001"),
			Inode: 61002, Cookie: 7, HasInfo: true, HasByteCounters: true, BytesAcked: 1 << 40, BytesReceived: 3 << 30},
		{State: TimeWait, Local: netip.MustParseAddrPort("127.0.0.1:40001"), Remote: netip.MustParseAddrPort("127.0.0.1:29500"), Cookie: 8},
		{State: Listen, Local: netip.MustParseAddrPort("[fd00::5]:43000"), Remote: netip.MustParseAddrPort("[::]:0"),
			Inode: 61004, Cookie: 9, HasInfo: true, HasByteCounters: true},
		{State: Established, Local: netip.MustParseAddrPort("[::ffff:127.0.0.1]:50000"), Remote: netip.MustParseAddrPort("[::ffff:127.0.0.1]:29500"),
			Inode: 61005, Cookie: 10, HasInfo: true, HasByteCounters: true, BytesAcked: 123, BytesReceived: 456},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d sockets; want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("socket %d\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// Before Linux 4.1 tcp_info ends before tcpi_bytes_acked: the socket is
// listed without byte counters, and counted as such.
func TestDumpShortTCPInfo(t *testing.T) {
	littleEndianHost(t)
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		length   int
		counters bool
	}{
		{104, false}, // Linux 3.x: up to tcpi_total_retrans
		{120, false}, // 3.15: pacing rates, no byte counters
		{128, false}, // bytes_acked only: cut in the middle is still not enough
		{135, false},
		{136, true}, // 4.1: both counters
	} {
		s := goldenSocket{family: 2, state: 1, src: lo, dst: lo, sport: 1, dport: 2, inode: 5, tcpInfo: tcpInfo(tc.length, 1, 99, 77)}
		c := &scriptedConn{reply: func(family uint8, seq uint32) [][]byte {
			if family == 2 {
				return [][]byte{concat(nlmsg(typeSockDiagFam, nlmF_MULTI, seq, s.inetDiagMsg()), doneMsg(seq, 0))}
			}
			return [][]byte{doneMsg(seq, 0)}
		}}
		got, st, err := collect(t, c)
		if err != nil {
			t.Fatalf("length %d: %v", tc.length, err)
		}
		if len(got) != 1 || !got[0].HasInfo || got[0].HasByteCounters != tc.counters {
			t.Fatalf("length %d: %+v", tc.length, got)
		}
		if wantShort := !tc.counters; (st.ShortInfo == 1) != wantShort {
			t.Errorf("length %d: ShortInfo %d", tc.length, st.ShortInfo)
		}
		if tc.counters && (got[0].BytesAcked != 99 || got[0].BytesReceived != 77) {
			t.Errorf("length %d: counters %d/%d", tc.length, got[0].BytesAcked, got[0].BytesReceived)
		}
		if !tc.counters && (got[0].BytesAcked != 0 || got[0].BytesReceived != 0) {
			t.Errorf("length %d: counters read past the end: %d/%d", tc.length, got[0].BytesAcked, got[0].BytesReceived)
		}
	}
}

func TestDumpErrors(t *testing.T) {
	littleEndianHost(t)
	lo := netip.MustParseAddr("127.0.0.1")
	good := goldenSocket{family: 2, state: 1, src: lo, dst: lo, inode: 1, tcpInfo: tcpInfo(136, 1, 1, 1)}.inetDiagMsg()
	for _, tc := range []struct {
		name  string
		reply func(seq uint32) []byte
		is    error
		has   string
	}{
		{"kernel refuses (tcp_diag not loaded)", func(seq uint32) []byte { return errorMsg(seq, syscall.ENOENT) }, syscall.ENOENT, "refused"},
		{"dump fails part way", func(seq uint32) []byte {
			return concat(nlmsg(typeSockDiagFam, nlmF_MULTI, seq, good), doneMsg(seq, -int32(syscall.ENOBUFS)))
		}, syscall.ENOBUFS, "dump ended"},
		{"message longer than the datagram", func(seq uint32) []byte {
			m := nlmsg(typeSockDiagFam, nlmF_MULTI, seq, good)
			binary.LittleEndian.PutUint32(m, uint32(len(m)+8))
			return m
		}, nil, "out of bounds"},
		{"message shorter than its header", func(seq uint32) []byte {
			m := nlmsg(typeSockDiagFam, nlmF_MULTI, seq, good)
			binary.LittleEndian.PutUint32(m, 8)
			return m
		}, nil, "out of bounds"},
		{"trailing bytes", func(seq uint32) []byte {
			return append(nlmsg(typeSockDiagFam, nlmF_MULTI, seq, good), 1, 2, 3, 4)
		}, nil, "trailing"},
		{"short inet_diag_msg", func(seq uint32) []byte {
			return nlmsg(typeSockDiagFam, nlmF_MULTI, seq, good[:40])
		}, nil, "inet_diag_msg of 40 bytes"},
		{"attribute longer than the message", func(seq uint32) []byte {
			m := append([]byte(nil), good...)
			binary.LittleEndian.PutUint16(m[72:], 200)
			return nlmsg(typeSockDiagFam, nlmF_MULTI, seq, m)
		}, nil, "attribute"},
		{"attribute shorter than its header", func(seq uint32) []byte {
			m := append([]byte(nil), good...)
			binary.LittleEndian.PutUint16(m[72:], 2)
			return nlmsg(typeSockDiagFam, nlmF_MULTI, seq, m)
		}, nil, "attribute"},
		{"unknown address family", func(seq uint32) []byte {
			m := append([]byte(nil), good...)
			m[0] = 1 // AF_UNIX
			return nlmsg(typeSockDiagFam, nlmF_MULTI, seq, m)
		}, nil, "address family 1"},
		{"unexpected message type", func(seq uint32) []byte { return nlmsg(16, nlmF_MULTI, seq, good) }, nil, "type 16"},
		{"no end", func(seq uint32) []byte { return nlmsg(typeSockDiagFam, nlmF_MULTI, seq, good) }, errTimeout, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &scriptedConn{reply: func(_ uint8, seq uint32) [][]byte { return [][]byte{tc.reply(seq)} }}
			_, _, err := collect(t, c)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v; want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.has) {
				t.Errorf("error %q lacks %q", err, tc.has)
			}
		})
	}
}

// Messages of another request are skipped; NLM_F_DUMP_INTR is reported; an
// acknowledgement (NLMSG_ERROR 0) is not an error; NLMSG_NOOP is skipped.
func TestDumpSequenceInterruptAndAck(t *testing.T) {
	littleEndianHost(t)
	lo := netip.MustParseAddr("127.0.0.1")
	mk := func(inode uint32) []byte {
		return goldenSocket{family: 2, state: 1, src: lo, dst: lo, inode: inode, tcpInfo: tcpInfo(136, 1, 1, 1)}.inetDiagMsg()
	}
	c := &scriptedConn{reply: func(family uint8, seq uint32) [][]byte {
		if family != 2 {
			return [][]byte{doneMsg(seq, 0)}
		}
		return [][]byte{concat(
			nlmsg(typeSockDiagFam, nlmF_MULTI, seq+100, mk(99)), // stale
			nlmsg(1, nlmF_MULTI, seq, nil),                      // NLMSG_NOOP
			errorMsg(seq, 0)[:16+20],                            // ack
			nlmsg(typeSockDiagFam, nlmF_MULTI|nlmF_DUMP_INTR, seq, mk(1)),
			nlmsg(typeSockDiagFam, nlmF_MULTI, seq, mk(2)),
			doneMsg(seq+100, -1), // stale end: must not end this dump
			doneMsg(seq, 0),
		)}
	}}
	got, st, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Inode != 1 || got[1].Inode != 2 || !st.Interrupted {
		t.Fatalf("got %+v, stats %+v", got, st)
	}
}

// A reply without NLM_F_MULTI is complete by itself.
func TestDumpSingleReply(t *testing.T) {
	littleEndianHost(t)
	lo := netip.MustParseAddr("127.0.0.1")
	m := goldenSocket{family: 2, state: 1, src: lo, dst: lo, inode: 3}.inetDiagMsg()
	c := &scriptedConn{reply: func(_ uint8, seq uint32) [][]byte { return [][]byte{nlmsg(typeSockDiagFam, 0, seq, m)} }}
	got, st, err := collect(t, c)
	if err != nil || len(got) != 2 || st.Sockets != 2 {
		t.Fatalf("got %+v, %+v, %v", got, st, err)
	}
}

func TestDumpCallbackErrorStops(t *testing.T) {
	littleEndianHost(t)
	lo := netip.MustParseAddr("127.0.0.1")
	m := goldenSocket{family: 2, state: 1, src: lo, dst: lo, inode: 3}.inetDiagMsg()
	c := &scriptedConn{reply: func(_ uint8, seq uint32) [][]byte {
		return [][]byte{concat(nlmsg(typeSockDiagFam, nlmF_MULTI, seq, m), nlmsg(typeSockDiagFam, nlmF_MULTI, seq, m), doneMsg(seq, 0))}
	}}
	stop := errors.New("stop")
	calls := 0
	_, err := dump(context.Background(), c, func(*Socket) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}

func TestDumpHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &scriptedConn{reply: func(uint8, uint32) [][]byte { return nil }}
	if _, err := dump(ctx, c, func(*Socket) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

// Whatever the kernel (or memory corruption) sends, the parser returns an
// error or sockets, never a panic.
func FuzzParseDatagram(f *testing.F) {
	lo := netip.MustParseAddr("127.0.0.1")
	f.Add(concat(nlmsg(typeSockDiagFam, nlmF_MULTI, 1,
		goldenSocket{family: 2, state: 1, src: lo, dst: lo, inode: 1, tcpInfo: tcpInfo(136, 1, 1, 1)}.inetDiagMsg()), doneMsg(1, 0)))
	f.Add(errorMsg(1, syscall.EPERM))
	f.Add(nlmsg(typeSockDiagFam, 0, 1, make([]byte, 72)))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseDatagram(b, 1, func(*Socket) error { return nil })
	})
}

func TestOnHostAndLoopback(t *testing.T) {
	for _, tc := range []struct {
		local, remote    string
		loopback, onHost bool
	}{
		{"127.0.0.1:1", "127.0.0.1:2", true, true},
		{"127.0.0.1:1", "127.5.6.7:2", true, true},
		{"[::1]:1", "[::1]:2", true, true},
		{"[::ffff:127.0.0.1]:1", "[::ffff:127.0.0.1]:2", true, true},
		{"10.0.0.5:1", "10.0.0.5:2", false, true}, // to the host's own address
		{"[::ffff:10.0.0.5]:1", "10.0.0.5:2", false, true},
		{"10.0.0.5:1", "10.0.0.6:2", false, false},
		{"127.0.0.1:1", "10.0.0.6:2", false, false},
		{"0.0.0.0:43000", "0.0.0.0:0", false, false}, // a listener
		{"[::]:43000", "[::]:0", false, false},
	} {
		s := Socket{Local: netip.MustParseAddrPort(tc.local), Remote: netip.MustParseAddrPort(tc.remote)}
		if s.Loopback() != tc.loopback || s.OnHost() != tc.onHost {
			t.Errorf("%s -> %s: loopback %v on host %v; want %v %v", tc.local, tc.remote, s.Loopback(), s.OnHost(), tc.loopback, tc.onHost)
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Established: "established", TimeWait: "time_wait", Listen: "listen",
		NewSynRecv: "new_syn_recv", BoundInactive: "bound_inactive", 0: "unknown(0)", 99: "unknown(99)"} {
		if s.String() != want {
			t.Errorf("%d: %q; want %q", s, s.String(), want)
		}
	}
}
