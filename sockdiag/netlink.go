package sockdiag

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"
)

// Wire constants, named as in the kernel's UAPI headers. They are spelled out
// here rather than taken from golang.org/x/sys/unix so that the codec builds
// and is tested on every platform; dump_linux_test.go checks them against
// x/sys.
const (
	afINET     = 2  // AF_INET
	afINET6    = 10 // AF_INET6
	ipprotoTCP = 6  // IPPROTO_TCP

	nlmsgHdrLen  = 16 // sizeof(struct nlmsghdr)
	nlmsgAlignTo = 4  // NLMSG_ALIGNTO
	nlaAlignTo   = 4  // NLA_ALIGNTO
	nlaHdrLen    = 4  // sizeof(struct nlattr)
	nlaTypeMask  = 0x3fff

	nlmsgNoop        = 0x1  // NLMSG_NOOP
	nlmsgError       = 0x2  // NLMSG_ERROR
	nlmsgDone        = 0x3  // NLMSG_DONE
	sockDiagByFamily = 20   // SOCK_DIAG_BY_FAMILY
	nlmFRequest      = 0x1  // NLM_F_REQUEST
	nlmFMulti        = 0x2  // NLM_F_MULTI
	nlmFDumpIntr     = 0x10 // NLM_F_DUMP_INTR
	nlmFDump         = 0x300

	inetDiagInfo = 2 // INET_DIAG_INFO: the attribute carrying struct tcp_info

	inetDiagReqBytecode = 1 // INET_DIAG_REQ_BYTECODE: the request's filter program
	inetDiagBCJmp       = 1 // INET_DIAG_BC_JMP
	inetDiagBCSGE       = 2 // INET_DIAG_BC_S_GE: local port >= the next op's no
	inetDiagBCSLE       = 3 // INET_DIAG_BC_S_LE
	inetDiagBCDGE       = 4 // INET_DIAG_BC_D_GE: remote port >= the next op's no
	inetDiagBCDLE       = 5 // INET_DIAG_BC_D_LE
)

// Struct layouts from include/uapi/linux/inet_diag.h and
// include/uapi/linux/tcp.h; offsets in bytes, checked with offsetof() against
// the 6.18 headers.
//
//	struct inet_diag_req_v2 (56 bytes)
//	   0 u8  sdiag_family      2 u8 idiag_ext       4 u32 idiag_states
//	   1 u8  sdiag_protocol    3 u8 pad             8 inet_diag_sockid (48)
//
//	struct inet_diag_sockid (48 bytes)
//	   0 be16 idiag_sport      4 be32 idiag_src[4]  40 u32 idiag_if
//	   2 be16 idiag_dport     20 be32 idiag_dst[4]  44 u32 idiag_cookie[2] (low, high)
//
//	struct inet_diag_msg (72 bytes), followed by nlattrs at NLMSG_ALIGN(72)
//	   0 u8 idiag_family   1 u8 idiag_state   2 u8 idiag_timer   3 u8 idiag_retrans
//	   4 inet_diag_sockid  52 u32 idiag_expires  56 u32 idiag_rqueue
//	  60 u32 idiag_wqueue  64 u32 idiag_uid      68 u32 idiag_inode
//
//	struct tcp_info: grown over the years; the kernel sends its own size.
//	 120 u64 tcpi_bytes_acked     (Linux 4.1; before: 104 bytes up to
//	 128 u64 tcpi_bytes_received   tcpi_total_retrans, 120 with pacing rates)
//	 136 is the least length that holds both
const (
	inetDiagReqV2Len      = 56
	inetDiagMsgLen        = 72
	offMsgSockID          = 4
	offMsgUID             = 64
	offMsgInode           = 68
	offSockIDDst          = 20
	offSockIDCookie       = 40
	offTCPInfoBytesAcked  = 120
	offTCPInfoBytesRecved = 128
	tcpInfoLenWithBytes   = 136
)

// heldStates asks for every TCP state a descriptor can hold, listening
// included. TIME_WAIT and SYN_RECV sockets belong to no descriptor (their
// inode is 0), carry no more traffic, and on a busy server outnumber the
// others: they are left in the kernel.
const heldStates = ^uint32(0) &^ (1<<TimeWait | 1<<SynRecv | 1<<NewSynRecv)

// requestTCPInfo is idiag_ext with the bit for INET_DIAG_INFO.
const requestTCPInfo = 1 << (inetDiagInfo - 1)

var native = binary.NativeEndian

func nlmsgAlign(n int) int { return (n + nlmsgAlignTo - 1) &^ (nlmsgAlignTo - 1) }
func nlaAlign(n int) int   { return (n + nlaAlignTo - 1) &^ (nlaAlignTo - 1) }

// encodeRequest builds the SOCK_DIAG_BY_FAMILY dump request for the TCP
// sockets of one address family in heldStates, asking for tcp_info, with
// the filter program bytecode when there is one.
func encodeRequest(family uint8, seq uint32, bytecode []byte) []byte {
	n := nlmsgHdrLen + inetDiagReqV2Len
	if len(bytecode) > 0 {
		n += nlaHdrLen + len(bytecode) // a multiple of 4: no padding
	}
	b := make([]byte, n)
	native.PutUint32(b[0:], uint32(len(b)))
	native.PutUint16(b[4:], sockDiagByFamily)
	native.PutUint16(b[6:], nlmFRequest|nlmFDump)
	native.PutUint32(b[8:], seq)
	// nlmsg_pid 0: the kernel is the destination.
	r := b[nlmsgHdrLen:]
	r[0] = family
	r[1] = ipprotoTCP
	r[2] = requestTCPInfo
	native.PutUint32(r[4:], heldStates)
	if len(bytecode) > 0 {
		a := b[nlmsgHdrLen+inetDiagReqV2Len:]
		native.PutUint16(a[0:], uint16(nlaHdrLen+len(bytecode)))
		native.PutUint16(a[2:], inetDiagReqBytecode)
		copy(a[nlaHdrLen:], bytecode)
	}
	return b
}

// PortPair is a connection's local and remote ports (0 for a listener's
// remote).
type PortPair struct{ Local, Remote uint16 }

// MaxPortPairs bounds a filtered dump: a longer program would pass the
// 64 KiB netlink attribute that carries it; ask for every socket instead.
const MaxPortPairs = 1024

// portFilter compiles "the socket's ports are one of pairs" into
// inet_diag's bytecode (net/ipv4/inet_diag.c, inet_diag_bc_run). Each op
// is {code u8, yes u8, no u16}: the program goes on yes bytes when the op
// holds and no bytes when not, and accepts a socket when it lands exactly
// on the end. A port comparison takes a second op whose no is the port.
// Per pair, four comparisons (equality as >= and <=, which every kernel
// with sock_diag knows) fall through on success to a JMP that ends the
// program (accept); a failed one skips to the next pair, or past the end
// (reject) from the last. The kernel's audit follows yes jumps only, so
// every op lies on that straight path and every no lands on an op start.
func portFilter(pairs []PortPair) []byte {
	const cmp, jmp = 8, 4
	const block = 4*cmp + jmp
	total := block * len(pairs)
	b := make([]byte, total)
	op := func(at int, code uint8, yes uint8, no int) {
		b[at], b[at+1] = code, yes
		native.PutUint16(b[at+2:], uint16(no))
	}
	for i, p := range pairs {
		start := block * i
		for k, c := range []struct {
			code uint8
			port uint16
		}{{inetDiagBCSGE, p.Local}, {inetDiagBCSLE, p.Local}, {inetDiagBCDGE, p.Remote}, {inetDiagBCDLE, p.Remote}} {
			at := start + k*cmp
			fail := start + block - at // the next pair
			if i == len(pairs)-1 {
				fail = total - at + 4 // past the end: reject
			}
			op(at, c.code, cmp, fail)
			op(at+4, 0, 0, int(c.port))
		}
		at := start + 4*cmp
		op(at, inetDiagBCJmp, jmp, total-at) // to the end: accept
	}
	return b
}

// datagramResult is what one datagram of a dump reply contained.
type datagramResult struct {
	sockets     int
	done        bool
	interrupted bool
}

// parseDatagram walks the netlink messages of one datagram of the reply to
// the request with sequence number seq, passing each socket to fn. Messages
// of another sequence (none should reach a fresh socket) are skipped.
func parseDatagram(b []byte, seq uint32, fn func(*Socket) error) (datagramResult, error) {
	var res datagramResult
	// One Socket for the datagram, handed to fn for each message in
	// turn (fn does not keep it): not one allocation per socket.
	var s Socket
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return res, fmt.Errorf("sock_diag: %d trailing bytes, shorter than a netlink header", len(b))
		}
		msgLen := int(native.Uint32(b[0:]))
		typ := native.Uint16(b[4:])
		flags := native.Uint16(b[6:])
		msgSeq := native.Uint32(b[8:])
		if msgLen < nlmsgHdrLen || msgLen > len(b) {
			return res, fmt.Errorf("sock_diag: netlink message length %d out of bounds (%d bytes left)", msgLen, len(b))
		}
		payload := b[nlmsgHdrLen:msgLen]
		next := nlmsgAlign(msgLen)
		if next > len(b) {
			next = len(b)
		}
		b = b[next:]
		if msgSeq != seq {
			continue
		}
		if flags&nlmFDumpIntr != 0 {
			res.interrupted = true
		}
		switch typ {
		case nlmsgNoop:
		case nlmsgDone:
			// NLMSG_DONE carries an int, the dump callback's last return
			// value: negative when the dump failed part way.
			if len(payload) >= 4 {
				if code := int32(native.Uint32(payload)); code < 0 {
					return res, fmt.Errorf("sock_diag: dump ended with error: %w", syscall.Errno(-code))
				}
			}
			res.done = true
			return res, nil
		case nlmsgError:
			if len(payload) < 4 {
				return res, fmt.Errorf("sock_diag: NLMSG_ERROR of %d bytes, too short for an error code", len(payload))
			}
			code := int32(native.Uint32(payload))
			if code == 0 { // an acknowledgement, not an error
				continue
			}
			return res, fmt.Errorf("sock_diag: kernel refused the dump: %w", syscall.Errno(-code))
		case sockDiagByFamily:
			var err error
			if s, err = decodeSocket(payload); err != nil {
				return res, err
			}
			res.sockets++
			if err := fn(&s); err != nil {
				return res, err
			}
		default:
			return res, fmt.Errorf("sock_diag: unexpected netlink message type %d", typ)
		}
		if flags&nlmFMulti == 0 {
			// A reply that is not part of a multi-part dump is complete.
			res.done = true
			return res, nil
		}
	}
	return res, nil
}

// decodeSocket reads one inet_diag_msg and its attributes.
func decodeSocket(b []byte) (Socket, error) {
	var s Socket
	if len(b) < inetDiagMsgLen {
		return s, fmt.Errorf("sock_diag: inet_diag_msg of %d bytes; want at least %d", len(b), inetDiagMsgLen)
	}
	family, id := b[0], b[offMsgSockID:offMsgSockID+48]
	s.State = State(b[1])
	sport, dport := binary.BigEndian.Uint16(id[0:]), binary.BigEndian.Uint16(id[2:])
	switch family {
	case afINET:
		s.Local = netip.AddrPortFrom(netip.AddrFrom4([4]byte(id[4:8])), sport)
		s.Remote = netip.AddrPortFrom(netip.AddrFrom4([4]byte(id[offSockIDDst:offSockIDDst+4])), dport)
	case afINET6:
		s.Local = netip.AddrPortFrom(netip.AddrFrom16([16]byte(id[4:20])), sport)
		s.Remote = netip.AddrPortFrom(netip.AddrFrom16([16]byte(id[offSockIDDst:offSockIDDst+16])), dport)
	default:
		return s, fmt.Errorf("sock_diag: socket of address family %d in a TCP dump", family)
	}
	s.Cookie = uint64(native.Uint32(id[offSockIDCookie:])) | uint64(native.Uint32(id[offSockIDCookie+4:]))<<32
	s.UID = native.Uint32(b[offMsgUID:])
	s.Inode = native.Uint32(b[offMsgInode:])

	attrs := b[nlmsgAlign(inetDiagMsgLen):]
	for len(attrs) > 0 {
		if len(attrs) < nlaHdrLen {
			return s, fmt.Errorf("sock_diag: %d trailing attribute bytes after socket %d", len(attrs), s.Inode)
		}
		l, typ := int(native.Uint16(attrs[0:])), native.Uint16(attrs[2:])&nlaTypeMask
		if l < nlaHdrLen || l > len(attrs) {
			return s, fmt.Errorf("sock_diag: attribute %d of socket %d has length %d, %d bytes left", typ, s.Inode, l, len(attrs))
		}
		if typ == inetDiagInfo {
			info := attrs[nlaHdrLen:l]
			s.HasInfo = true
			if len(info) >= tcpInfoLenWithBytes {
				s.HasByteCounters = true
				s.BytesAcked = native.Uint64(info[offTCPInfoBytesAcked:])
				s.BytesReceived = native.Uint64(info[offTCPInfoBytesRecved:])
			}
		}
		next := nlaAlign(l)
		if next > len(attrs) {
			next = len(attrs)
		}
		attrs = attrs[next:]
	}
	return s, nil
}

// Stats describes one dump.
type Stats struct {
	// Sockets is how many TCP sockets the dump listed.
	Sockets int
	// ShortInfo counts the sockets whose tcp_info was too short to hold the
	// byte counters: all of them on kernels before 4.1.
	ShortInfo int
	// Interrupted is true when the kernel flagged the dump inconsistent
	// (NLM_F_DUMP_INTR): the socket tables changed while they were read, so
	// a socket may be missing or listed twice.
	Interrupted bool
	// Filtered is true when the dump asked only for given port pairs.
	Filtered bool
}

// conn is the netlink socket as dump needs it; tests replace it with
// recorded datagrams.
type conn interface {
	send(b []byte) error
	// recv reads one datagram, waiting no later than deadline.
	recv(b []byte, deadline time.Time) (int, error)
}

// recvBufferSize bounds one datagram. The kernel sizes dump datagrams to the
// reader's buffer but never above 32 KiB (netlink_recvmsg caps
// max_recvmsg_len at SKB_WITH_OVERHEAD(32768)), so 64 KiB always suffices;
// a larger one is reported as truncated, never read past.
const recvBufferSize = 64 << 10

// defaultTimeout bounds a dump whose context has no deadline.
const defaultTimeout = 5 * time.Second

var lastSeq atomic.Uint32

var errTimeout = errors.New("timed out waiting for the kernel")

// dump runs one dump per address family over c, of the sockets whose ports
// are one of only (every socket when only is nil).
func dump(ctx context.Context, c conn, only []PortPair, fn func(*Socket) error) (Stats, error) {
	var st Stats
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultTimeout)
	}
	buf := make([]byte, recvBufferSize)
	count := func(s *Socket) error {
		if s.HasInfo && !s.HasByteCounters {
			st.ShortInfo++
		}
		return fn(s)
	}
	if len(only) > MaxPortPairs {
		return st, fmt.Errorf("sock_diag: %d port pairs, more than %d", len(only), MaxPortPairs)
	}
	var bytecode []byte
	if only != nil {
		if len(only) == 0 {
			return st, nil // nothing can match
		}
		bytecode = portFilter(only)
		st.Filtered = true
	}
	for _, family := range []uint8{afINET, afINET6} {
		seq := lastSeq.Add(1)
		if err := c.send(encodeRequest(family, seq, bytecode)); err != nil {
			return st, fmt.Errorf("sock_diag: sending the dump request: %w", err)
		}
		for done := false; !done; {
			if err := ctx.Err(); err != nil {
				return st, fmt.Errorf("sock_diag: %w", err)
			}
			n, err := c.recv(buf, deadline)
			if err != nil {
				return st, fmt.Errorf("sock_diag: reading the dump: %w", err)
			}
			res, err := parseDatagram(buf[:n], seq, count)
			st.Sockets += res.sockets
			st.Interrupted = st.Interrupted || res.interrupted
			if err != nil {
				return st, err
			}
			done = res.done
		}
	}
	return st, nil
}
