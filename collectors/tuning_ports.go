package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

var (
	hostPortFirstDesc   = tuningDesc("ephemeral_port_range_first", "First port of net.ipv4.ip_local_port_range.")
	hostPortLastDesc    = tuningDesc("ephemeral_port_range_last", "Last port of net.ipv4.ip_local_port_range.")
	hostPortSocketsDesc = tuningDesc("ephemeral_port_sockets",
		"TCP sockets (IPv4 and IPv6, any state including TIME_WAIT) whose local port lies in the ephemeral range, in the daemon's network namespace; counted when /proc/net/sockstat holds a tenth of the range in TCP sockets, else at least every 5 minutes.")
	hostPortsInUseDesc = tuningDesc("ephemeral_ports_in_use", "Distinct ephemeral-range ports held by at least one TCP socket.")
	hostPortUsageDesc  = tuningDesc("ephemeral_port_usage_ratio", "Fraction of the ephemeral port range held by TCP sockets (ephemeral_ports_in_use over the range size).")
)

// ephemeralCount is one walk of the TCP tables over one port range.
type ephemeralCount struct {
	at                    time.Time
	first, last           int
	sockets, distinctPort int
}

// ephemeralRecount and ephemeralWalkShare decide when the TCP tables are
// walked for the ephemeral port count. A walk of /proc/net/tcp{,6} visits
// every bucket of the kernel's TCP hash table, sized by the host's memory
// (524,288 buckets and 15 ms of kernel time on a 128 GB host) however few
// sockets there are, while /proc/net/sockstat{,6} holds the namespace's TCP
// socket counts in one small read. Every sample reads sockstat; the tables
// are walked when its count reaches ephemeralWalkShare of the range (the
// ports could then be near running out; the audit warns at 80%) or falls
// below the ports last counted (that count is out of date), and otherwise at
// least every ephemeralRecount for the gauges.
const (
	ephemeralRecount   = 5 * time.Minute
	ephemeralWalkShare = 0.1
)

// readEphemeralPorts counts the TCP sockets holding a port of the ephemeral
// range. Ports, not sockets, are what runs out: a connect() can share a local
// port with sockets to other destinations, a bind() cannot, so the usage
// ratio counts distinct ports.
func (c *tuningCollector) readEphemeralPorts(ctx context.Context, t *sample.HostTuning) error {
	v, err := c.host.SysctlInts("net.ipv4.ip_local_port_range")
	if err != nil || v == nil {
		return err
	}
	if len(v) != 2 || v[0] <= 0 || v[1] < v[0] {
		return fmt.Errorf("%s: want two ascending ports, got %v", c.host.ProcPath("sys/net/ipv4/ip_local_port_range"), v)
	}
	t.EphemeralPortFirst, t.EphemeralPortLast = v[0], v[1]
	now := c.now()
	if p := c.ports; p.first == v[0] && p.last == v[1] && now.Sub(p.at) < ephemeralRecount {
		// The TCP sockets bound the distinct local ports: a port is held
		// by a socket in use or in TIME_WAIT, or by a connection being
		// accepted on a listener's port, the listener counted. A count
		// above them is out of date.
		if n, err := c.host.TCPSockets(); err == nil && p.distinctPort <= n && float64(n) < ephemeralWalkShare*float64(t.EphemeralPortRangeSize()) {
			t.EphemeralPortSockets, t.EphemeralPortsInUse = p.sockets, p.distinctPort
			return nil
		}
	}
	inUse := map[uint64]struct{}{}
	for _, table := range []string{"tcp", "tcp6"} {
		err := c.host.TCPLocalPorts(ctx, table, func(port uint64) {
			if port >= uint64(v[0]) && port <= uint64(v[1]) {
				t.EphemeralPortSockets++
				inUse[port] = struct{}{}
			}
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue // IPv6 disabled
		}
		if err != nil {
			return err
		}
	}
	t.EphemeralPortsInUse = len(inUse)
	c.ports = ephemeralCount{at: now, first: v[0], last: v[1], sockets: t.EphemeralPortSockets, distinctPort: t.EphemeralPortsInUse}
	return nil
}

func ephemeralPortMetrics(t *sample.HostTuning, gauge tuningGauge) {
	if t.EphemeralPortRangeSize() > 0 {
		gauge(hostPortFirstDesc, float64(t.EphemeralPortFirst))
		gauge(hostPortLastDesc, float64(t.EphemeralPortLast))
		gauge(hostPortSocketsDesc, float64(t.EphemeralPortSockets))
		gauge(hostPortsInUseDesc, float64(t.EphemeralPortsInUse))
		gauge(hostPortUsageDesc, t.EphemeralPortUsage())
	}
}
