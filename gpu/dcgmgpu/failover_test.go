package dcgmgpu

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"go.uber.org/goleak"

	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/sample"
)

// hostengine is an nv-hostengine the test can stop and start again. Each
// connection to it is a fakeClient whose reads fail while it is down, as
// go-dcgm's do once the hostengine's socket closes.
type hostengine struct {
	mu       sync.Mutex
	down     bool
	conns    int // connections open now
	maxConns int
}

func (h *hostengine) setDown(down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down = down
}

func (h *hostengine) isDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

func (h *hostengine) connections() (now, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns, h.maxConns
}

// open is what Open does against this hostengine: connect, then open.
func (h *hostengine) open(clock func() time.Time) (gpu.Backend, error) {
	h.mu.Lock()
	if h.down {
		h.mu.Unlock()
		return nil, errors.New("DCGM: cannot connect to hostengine at 127.0.0.1:5555: connection refused")
	}
	h.conns++
	h.maxConns = max(h.maxConns, h.conns)
	h.mu.Unlock()
	return open(&engineClient{fakeClient: newFake(0, 1), h: h}, Options{Now: clock})
}

type engineClient struct {
	*fakeClient
	h *hostengine
}

var errConnection = errors.New("Host engine connection invalid/disconnected")

func (c *engineClient) Latest(gpus []uint, fields []dcgm.Short) ([]value, error) {
	if c.h.isDown() {
		return nil, errConnection
	}
	return c.fakeClient.Latest(gpus, fields)
}

func (c *engineClient) Shutdown() error {
	c.h.mu.Lock()
	c.h.conns--
	c.h.mu.Unlock()
	return c.fakeClient.Shutdown()
}

// waitFor polls cond until it holds, however long a loaded machine takes;
// only a guard shortly before the test binary's -timeout ends the wait,
// failing nothing the timeout would not, but naming what never came.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	var guard <-chan time.Time
	if d, ok := t.Deadline(); ok {
		left := time.Until(d)
		guard = time.After(left - min(left/10, 30*time.Second))
	}
	for !cond() {
		select {
		case <-guard:
			t.Fatalf("still waiting for %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// The hostengine dies mid-run: after gpu.DefaultFailures failed samples the
// readings come from NVML, the DCGM connection is shut down, and when the
// hostengine is back a fresh DCGM backend (through open, as Open does) takes
// over again. One DCGM connection at most exists at any time.
func TestHostengineDiesFailoverToNVMLAndBack(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	he := &hostengine{}
	lib := nvmlfake.New(nvmlfake.Hopper(0), nvmlfake.Hopper(1))
	openDCGM := func() (gpu.Backend, error) { return he.open(clock.Now) }
	openNVML := func() (gpu.Backend, error) { return nvmlgpu.Open(lib, nvmlgpu.Options{Now: clock.Now}) }
	primary, err := openDCGM()
	if err != nil {
		t.Fatal(err)
	}
	f := gpu.NewFailover(primary, gpu.FailoverOptions{OpenPrimary: openDCGM, OpenFallback: openNVML, Now: clock.Now})
	// No deadline: no call here hangs (the hostengine fails at once),
	// and a good sample outlasting one on a loaded machine counted as a
	// failure toward giving DCGM up.
	next := func() (*sample.GPUs, error) {
		clock.Advance(time.Second)
		return f.Sample(context.Background())
	}
	good := func(backend string) *sample.GPUs {
		t.Helper()
		s, err := next()
		if err != nil || s.Backend != backend || len(s.Devices) != 2 || !s.Devices[0].Up || !s.Devices[1].Up {
			t.Fatalf("sample %+v, %v; want both GPUs up through %s", s, err, backend)
		}
		return s
	}
	good("dcgm")

	he.setDown(true)
	for range gpu.DefaultFailures {
		if _, err := next(); err == nil || !strings.Contains(err.Error(), "no GPU answered") {
			t.Fatalf("sample with the hostengine down: %v", err)
		}
	}
	waitFor(t, "the DCGM connection to be shut down", func() bool { n, _ := he.connections(); return n == 0 })
	s := good("nvml")
	if s.Fallback == nil || s.Fallback.Preferred != "dcgm" || !strings.Contains(s.Fallback.Reason, errConnection.Error()) {
		t.Fatalf("fallback %+v; want DCGM named with the connection error", s.Fallback)
	}

	he.setDown(false)
	clock.Advance(gpu.DefaultRetryMin)
	// Sampling goes on (through NVML); one of these samples finds the
	// reconnect due and starts it in the background.
	waitFor(t, "readings to return to DCGM", func() bool { next(); return f.Name() == "dcgm" })
	s = good("dcgm")
	if s.Fallback != nil || len(s.Switches) != 2 {
		t.Fatalf("back on DCGM: fallback %+v, switches %+v", s.Fallback, s.Switches)
	}
	waitFor(t, "NVML to be shut down", func() bool { _, _, _, shutdowns := lib.Counts(); return shutdowns == 1 })
	if _, most := he.connections(); most != 1 {
		t.Fatalf("%d DCGM connections at once; go-dcgm holds one per process", most)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := he.connections(); n != 0 {
		t.Fatalf("%d DCGM connections left after Close", n)
	}
}
