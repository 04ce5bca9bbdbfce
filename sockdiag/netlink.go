package sockdiag

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
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
// sockets of one address family in heldStates, asking for tcp_info.
func encodeRequest(family uint8, seq uint32) []byte {
	b := make([]byte, nlmsgHdrLen+inetDiagReqV2Len)
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
	return b
}

// SocketID names one socket to Lookup: its ends as a dump listed them, and
// its cookie, which tells it from a later socket under the same ends.
type SocketID struct {
	Local, Remote netip.AddrPort
	Cookie        uint64
}

// ID is the socket's SocketID.
func (s *Socket) ID() SocketID { return SocketID{Local: s.Local, Remote: s.Remote, Cookie: s.Cookie} }

// appendLookup appends the SOCK_DIAG_BY_FAMILY request for one socket to
// dst: no dump flag, so the kernel looks the socket up in its hash tables
// (inet_diag_find_one_icsk) instead of walking every bucket of them.
func appendLookup(dst []byte, id SocketID, seq uint32) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, nlmsgHdrLen+inetDiagReqV2Len)...)
	b := dst[start:]
	native.PutUint32(b[0:], uint32(len(b)))
	native.PutUint16(b[4:], sockDiagByFamily)
	native.PutUint16(b[6:], nlmFRequest)
	native.PutUint32(b[8:], seq)
	r := b[nlmsgHdrLen:]
	r[0] = afINET6
	if id.Local.Addr().Is4() {
		r[0] = afINET
	}
	r[1] = ipprotoTCP
	r[2] = requestTCPInfo
	native.PutUint32(r[4:], heldStates)
	sid := r[8:]
	binary.BigEndian.PutUint16(sid[0:], id.Local.Port())
	binary.BigEndian.PutUint16(sid[2:], id.Remote.Port())
	putAddr := func(dst []byte, a netip.Addr) {
		if a.Is4() {
			v := a.As4()
			copy(dst, v[:])
		} else {
			v := a.As16()
			copy(dst, v[:])
		}
	}
	putAddr(sid[4:20], id.Local.Addr())
	putAddr(sid[offSockIDDst:offSockIDDst+16], id.Remote.Addr())
	native.PutUint32(sid[offSockIDCookie:], uint32(id.Cookie))
	native.PutUint32(sid[offSockIDCookie+4:], uint32(id.Cookie>>32))
	return dst
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
}

// lookupBatch is how many lookups go to the kernel in one send. The kernel
// answers the messages of a send one after the other, queueing each reply
// on the socket (an inet_diag_msg with its attributes, well under a
// kilobyte: 16 fit the default receive buffer many times over), so a
// lookup costs one receive instead of a send and a receive.
const lookupBatch = 16

// lookup asks for each socket of ids over c, lookupBatch requests to a send,
// passing those the kernel has to fn; gone are those it has not (closed, or
// another socket under the same ends: ENOENT, ESTALE).
func lookup(ctx context.Context, c conn, ids []SocketID, fn func(*Socket) error) (st Stats, gone []SocketID, err error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultTimeout)
	}
	bp := recvBuffers.Get().(*[]byte)
	defer recvBuffers.Put(bp)
	buf := *bp
	count := func(s *Socket) error {
		if s.HasInfo && !s.HasByteCounters {
			st.ShortInfo++
		}
		return fn(s)
	}
	var req []byte
	for len(ids) > 0 {
		if err := ctx.Err(); err != nil {
			return st, gone, fmt.Errorf("sock_diag: %w", err)
		}
		batch := ids[:min(lookupBatch, len(ids))]
		ids = ids[len(batch):]
		first := lastSeq.Add(uint32(len(batch))) - uint32(len(batch)) + 1
		req = req[:0]
		for i, id := range batch {
			req = appendLookup(req, id, first+uint32(i))
		}
		if err := c.send(req); err != nil {
			return st, gone, fmt.Errorf("sock_diag: sending lookups: %w", err)
		}
		for i, id := range batch {
			seq := first + uint32(i)
			for done := false; !done; {
				n, err := c.recv(buf, deadline)
				if err != nil {
					return st, gone, fmt.Errorf("sock_diag: reading a lookup's reply: %w", err)
				}
				res, err := parseDatagram(buf[:n], seq, count)
				st.Sockets += res.sockets
				switch {
				case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE):
					gone = append(gone, id)
					done = true
				case err != nil:
					return st, gone, err
				default:
					done = res.done
				}
			}
		}
	}
	return st, gone, nil
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

// recvBuffers hold the receive buffers between dumps and lookups: the tcp
// collector looks its sockets up every second, and 64 KiB a second was the
// largest of its allocations.
var recvBuffers = sync.Pool{New: func() any {
	b := make([]byte, recvBufferSize)
	return &b
}}

// defaultTimeout bounds a dump whose context has no deadline.
const defaultTimeout = 5 * time.Second

var lastSeq atomic.Uint32

var errTimeout = errors.New("timed out waiting for the kernel")

// dump runs one dump per address family over c.
func dump(ctx context.Context, c conn, fn func(*Socket) error) (Stats, error) {
	var st Stats
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultTimeout)
	}
	bp := recvBuffers.Get().(*[]byte)
	defer recvBuffers.Put(bp)
	buf := *bp
	count := func(s *Socket) error {
		if s.HasInfo && !s.HasByteCounters {
			st.ShortInfo++
		}
		return fn(s)
	}
	for _, family := range []uint8{afINET, afINET6} {
		seq := lastSeq.Add(1)
		if err := c.send(encodeRequest(family, seq)); err != nil {
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
