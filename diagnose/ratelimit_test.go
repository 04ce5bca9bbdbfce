package diagnose

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// Defaults of the daemon's flags (cmd/exporter): per client 2/s, burst 20;
// all clients 10/s, burst 40.
var defaultLimits = HandlerOptions{RatePerSecond: 2, Burst: 20, GlobalRatePerSecond: 10, GlobalBurst: 40}

// limitedHandler is /diagnose over a few samples with the given limits and
// a clock the test moves.
func limitedHandler(o HandlerOptions) (http.Handler, *time.Time) {
	r, now := runnerWith(3, func(int) *sample.GPUs { return gpuSample(0.9, 0) })
	clock := now
	o.Now = func() time.Time { return now }
	o.RateClock = func() time.Time { return clock }
	return r.Handler(o), &clock
}

func from(h http.Handler, remoteAddr, xff string) int {
	req := httptest.NewRequest("GET", "/diagnose", nil)
	req.RemoteAddr = remoteAddr
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

// A script polling hard gets 429s and no one else does: with the default
// limits the on-call engineer's 12 back-to-back requests are all served
// while the script polls (issue 15: 3 of 12 were refused by the one global
// bucket the script drained).
func TestDiagnoseLimitIsPerClient(t *testing.T) {
	h, clock := limitedHandler(defaultLimits)
	const script, engineer = "10.0.0.7:40000", "10.0.0.9:51000"
	refused := 0
	// The script polls 50 times every 100 ms of the fake clock, for a minute;
	// at 0.5 s, 20.5 s and 40.5 s the engineer sends 12 back to back.
	for tick := range 600 {
		for range 50 {
			if from(h, script, "") == http.StatusTooManyRequests {
				refused++
			}
		}
		if tick%200 == 5 {
			for i := range 12 {
				if code := from(h, engineer, ""); code != http.StatusOK {
					t.Fatalf("at %v the engineer's request %d of 12 got %d while the script polled", time.Duration(tick)*100*time.Millisecond, i+1, code)
				}
			}
		}
		*clock = clock.Add(100 * time.Millisecond)
	}
	// The script had its burst and its rate, no more.
	if served, most := 600*50-refused, 20+2*60+1; served > most || refused == 0 {
		t.Fatalf("the script was served %d times in a minute; its limit allows %d", served, most)
	}
}

// The global ceiling bounds all clients together, and a client refused by
// its own limit takes nothing from it.
func TestDiagnoseGlobalCeiling(t *testing.T) {
	h, clock := limitedHandler(HandlerOptions{RatePerSecond: 1, Burst: 2, GlobalRatePerSecond: 1, GlobalBurst: 5})
	// A greedy client's refused requests leave the global bucket alone.
	for range 100 {
		from(h, "192.0.2.1:1", "")
	}
	served := 0
	for i := range 10 {
		if from(h, fmt.Sprintf("192.0.2.%d:1", 10+i), "") == http.StatusOK {
			served++
		}
	}
	if served != 3 { // 5 global tokens, 2 taken by the greedy client
		t.Fatalf("%d of 10 new clients served; want the 3 global tokens the greedy client left", served)
	}
	req := httptest.NewRequest("GET", "/diagnose", nil)
	req.RemoteAddr = "192.0.2.99:1"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("past the ceiling: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	*clock = clock.Add(time.Second)
	if code := from(h, "192.0.2.99:1", ""); code != http.StatusOK {
		t.Fatalf("a second later: %d", code)
	}
}

// Many distinct clients (10,000 addresses, as an attacker with an IPv6
// prefix has) keep the table at its bound; clients idle long enough to have
// refilled are dropped without waiting for the bound.
func TestDiagnoseClientTableBounded(t *testing.T) {
	clock := t0
	lim := newRateLimiter(HandlerOptions{RatePerSecond: 2, Burst: 20, MaxClients: 1000, RateClock: func() time.Time { return clock }})
	for i := range 10_000 {
		req := httptest.NewRequest("GET", "/diagnose", nil)
		req.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}), 443).String()
		if ok, _, _ := lim.allow(req); !ok {
			t.Fatalf("client %d refused on its first request", i)
		}
		if n := lim.size(); n > 1000 {
			t.Fatalf("%d clients in the table; the bound is 1000", n)
		}
	}
	// burst/rate = 10 s later every bucket is full again: the next client's
	// request sweeps them all out.
	clock = clock.Add(10 * time.Second)
	req := httptest.NewRequest("GET", "/diagnose", nil)
	req.RemoteAddr = "198.51.100.1:1"
	lim.allow(req)
	if n := lim.size(); n != 1 {
		t.Fatalf("%d clients kept after all went idle; want 1", n)
	}
}

// X-Forwarded-For names the client only behind a trusted proxy; from anyone
// else it is ignored (or every request could claim a fresh address).
func TestDiagnoseForwardedForTrust(t *testing.T) {
	trusted, err := ParseTrustedProxies([]string{"10.1.0.0/16", "10.2.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	lim := newRateLimiter(HandlerOptions{RatePerSecond: 1, Burst: 1, TrustedProxies: trusted, RateClock: time.Now})
	for _, tc := range []struct{ remote, xff, want string }{
		{"192.0.2.1:5", "203.0.113.9", "192.0.2.1"},                     // not a proxy: header ignored
		{"10.1.3.4:5", "203.0.113.9", "203.0.113.9"},                    // trusted proxy
		{"10.1.3.4:5", "6.6.6.6, 203.0.113.9, 10.2.0.5", "203.0.113.9"}, // rightmost untrusted hop
		{"10.1.3.4:5", "garbage, 203.0.113.9:8080", "203.0.113.9"},      // a port after the address
		{"10.1.3.4:5", "203.0.113.9, garbage", "10.1.3.4"},              // unreadable last hop: the proxy
		{"10.1.3.4:5", "", "10.1.3.4"},                                  // no header
		{"[::ffff:10.1.3.4]:5", "2001:db8::1", "2001:db8::1"},           // IPv4-mapped proxy address
		{"[2001:db8::7]:5", "", "2001:db8::7"},
		{"vm(3):1024", "", "vm(3)"},
	} {
		req := httptest.NewRequest("GET", "/diagnose", nil)
		req.RemoteAddr = tc.remote
		if tc.xff != "" {
			req.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := lim.client(req); got != tc.want {
			t.Errorf("from %s with X-Forwarded-For %q: client %q; want %q", tc.remote, tc.xff, got, tc.want)
		}
	}
	if _, err := ParseTrustedProxies([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad CIDR was accepted")
	}
}
