package diagnose

import (
	"container/list"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// defaultMaxClients bounds the per-client table: a few thousand entries of
// about 200 bytes. Past it the least recently seen client is forgotten.
const defaultMaxClients = 4096

// rateLimiter bounds /diagnose per client and for all clients together.
//
// One global bucket let a polling script take every token: 3 of 12
// back-to-back requests of the on-call engineer were refused (issue 15).
// Each client (remote IP) now has its own bucket, and the global one is a
// ceiling that protects the node's CPU whatever the number of clients. A
// request refused by its client's bucket takes nothing from the global
// one, so a greedy client cannot drain it for the others beyond its own
// rate.
type rateLimiter struct {
	perClient rate.Limit // 0: no per-client limit
	burst     int
	global    *rate.Limiter // nil: no ceiling
	trusted   []netip.Prefix
	max       int
	now       func() time.Time

	mu      sync.Mutex
	clients map[string]*list.Element // of *clientBucket
	lru     list.List                // most recently seen first
}

type clientBucket struct {
	key  string
	lim  *rate.Limiter
	last time.Time
}

// Refusals say whose limit refused a request.
const (
	refusedClient = "client"
	refusedGlobal = "global"
)

func newRateLimiter(o HandlerOptions) *rateLimiter {
	l := &rateLimiter{burst: o.Burst, trusted: o.TrustedProxies, max: o.MaxClients, now: o.RateClock,
		clients: map[string]*list.Element{}}
	if o.RatePerSecond > 0 {
		l.perClient = rate.Limit(o.RatePerSecond)
	}
	if o.GlobalRatePerSecond > 0 {
		l.global = rate.NewLimiter(rate.Limit(o.GlobalRatePerSecond), o.GlobalBurst)
	}
	if l.max <= 0 {
		l.max = defaultMaxClients
	}
	return l
}

// allow says whether req may be served now; if not, whose limit refused it
// and how long until it would be served.
func (l *rateLimiter) allow(req *http.Request) (ok bool, refusedBy string, retry time.Duration) {
	now := l.now()
	var mine *rate.Reservation
	if l.perClient > 0 {
		mine = l.bucket(l.client(req), now).ReserveN(now, 1)
		if d := mine.DelayFrom(now); !mine.OK() || d > 0 {
			mine.CancelAt(now)
			return false, refusedClient, d
		}
	}
	if l.global != nil {
		all := l.global.ReserveN(now, 1)
		if d := all.DelayFrom(now); !all.OK() || d > 0 {
			all.CancelAt(now)
			if mine != nil {
				mine.CancelAt(now) // refused: the client is not charged
			}
			return false, refusedGlobal, d
		}
	}
	return true, "", 0
}

// bucket returns key's bucket, creating it, and forgets clients the table
// no longer needs.
func (l *rateLimiter) bucket(key string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A bucket left alone for burst/rate is full again: forgetting it
	// changes nothing, so the table holds only the recently active.
	refill := time.Duration(float64(l.burst) / float64(l.perClient) * float64(time.Second))
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		b := e.Value.(*clientBucket)
		if now.Sub(b.last) < refill {
			break
		}
		l.forget(e)
	}
	if e, ok := l.clients[key]; ok {
		b := e.Value.(*clientBucket)
		b.last = now
		l.lru.MoveToFront(e)
		return b.lim
	}
	// More active clients than the table holds (many addresses, as an
	// attacker with an IPv6 prefix has): the least recently seen one is
	// forgotten and would start afresh; the global ceiling still holds.
	for l.lru.Len() >= l.max {
		l.forget(l.lru.Back())
	}
	b := &clientBucket{key: key, lim: rate.NewLimiter(l.perClient, l.burst), last: now}
	l.clients[key] = l.lru.PushFront(b)
	return b.lim
}

func (l *rateLimiter) forget(e *list.Element) {
	delete(l.clients, e.Value.(*clientBucket).key)
	l.lru.Remove(e)
}

func (l *rateLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// client names who sent req: its remote IP. X-Forwarded-For is believed
// only from a trusted proxy (anyone else could name any address and get a
// fresh bucket per request): then the client is the rightmost address not
// itself a trusted proxy, the last one a trusted hop vouches for.
func (l *rateLimiter) client(req *http.Request) string {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		// Not TCP (a vsock's "vm(3):1024"): the host part, else all of it.
		if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
			return host
		}
		return req.RemoteAddr
	}
	ip := ap.Addr().Unmap()
	if !l.isTrusted(ip) {
		return ip.String()
	}
	hops := strings.Split(strings.Join(req.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parseHop(hops[i])
		if !ok {
			break // garbage from a trusted proxy: key on the last good hop
		}
		ip = hop
		if !l.isTrusted(hop) {
			break
		}
	}
	return ip.String()
}

func (l *rateLimiter) isTrusted(ip netip.Addr) bool {
	for _, p := range l.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil { // some proxies add the port
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// retryAfter is a Retry-After value: whole seconds, at least 1.
func retryAfter(d time.Duration) int {
	if d <= 0 || d == rate.InfDuration {
		return 1
	}
	return int(math.Ceil(d.Seconds()))
}

// ParseTrustedProxies reads CIDRs or single addresses.
func ParseTrustedProxies(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, &net.ParseError{Type: "CIDR or IP address", Text: s}
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
