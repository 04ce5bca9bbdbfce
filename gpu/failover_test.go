package gpu

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpudiag/gpudiag/sample"
)

// service stands in for what a backend talks to (a hostengine, a driver):
// tests kill it, revive it or make its calls hang, and it counts the
// backends open on it.
type service struct {
	name string

	mu      sync.Mutex
	dead    bool
	hang    chan struct{} // non-nil: Sample blocks until it is closed
	openNow int
	maxOpen int
	opens   int
	closes  int
}

func (s *service) set(f func(*service)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *service) get() (dead bool, openNow, maxOpen, opens, closes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead, s.openNow, s.maxOpen, s.opens, s.closes
}

// open is the service's Opener: it fails while the service is dead.
func (s *service) open() (Backend, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	if s.dead {
		return nil, errors.New(s.name + ": cannot connect")
	}
	s.openNow++
	s.maxOpen = max(s.maxOpen, s.openNow)
	return &fakeBackend{s: s}, nil
}

// fakeBackend is one connection to a service. Like dcgmgpu's, its Close
// waits for a Sample in flight.
type fakeBackend struct {
	s      *service
	inUse  sync.Mutex
	closed bool
}

func (b *fakeBackend) Name() string { return b.s.name }

func (b *fakeBackend) Sample(ctx context.Context) (*sample.GPUs, error) {
	b.inUse.Lock()
	defer b.inUse.Unlock()
	b.s.mu.Lock()
	hang := b.s.hang
	b.s.mu.Unlock()
	if hang != nil {
		// The sample's deadline passes now that the call hangs (see
		// rig.sample); the call itself waits on.
		if pass, ok := ctx.Value(passDeadline{}).(context.CancelFunc); ok {
			pass()
		}
		<-hang
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.s.dead || b.closed {
		return &sample.GPUs{Backend: b.s.name, Devices: []sample.GPU{{Error: "connection lost"}}},
			errors.New("no GPU answered (1 known): connection lost")
	}
	return &sample.GPUs{Backend: b.s.name, Devices: []sample.GPU{{Up: true}}}, nil
}

func (b *fakeBackend) Close() error {
	b.inUse.Lock()
	defer b.inUse.Unlock()
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.s.openNow--
		b.s.closes++
	}
	return nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// rig is a Failover over a fake DCGM and a fake NVML.
type rig struct {
	t          *testing.T
	dcgm, nvml *service
	clk        *clock
	f          *Failover
}

func newRig(t *testing.T, withFallback bool) *rig {
	t.Helper()
	r := &rig{t: t, dcgm: &service{name: "dcgm"}, nvml: &service{name: "nvml"},
		clk: &clock{t: time.Unix(1_700_000_000, 0)}}
	p, err := r.dcgm.open()
	if err != nil {
		t.Fatal(err)
	}
	opts := FailoverOptions{OpenPrimary: r.dcgm.open, RetryMin: 30 * time.Second, RetryMax: 100 * time.Second, Now: r.clk.Now}
	if withFallback {
		opts.OpenFallback = r.nvml.open
	}
	r.f = NewFailover(p, opts)
	return r
}

// passDeadline keys the cancel function a sample's context carries: a
// fake backend's call that hangs calls it, and the sample's deadline has
// passed.
type passDeadline struct{}

// sample takes one sample with a deadline, as the engine does; the
// deadline passes when, and only when, the backend's call hangs. A clock
// deadline (it was 100 ms) made a good sample on a loaded machine fail,
// and a failure counted toward giving DCGM up: the tests judged the
// machine's speed, not the failover.
func (r *rig) sample() (*sample.GPUs, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	return r.f.Sample(context.WithValue(ctx, passDeadline{}, cancel))
}

// hangGuard ends a wait for what never happens: shortly before the test
// binary's -timeout would end the run, or never where there is none. It
// fails nothing the timeout would not, and names what was awaited.
func (r *rig) hangGuard() <-chan time.Time {
	d, ok := r.t.Deadline()
	if !ok {
		return nil
	}
	left := time.Until(d)
	return time.After(left - min(left/10, 30*time.Second))
}

// settle waits until no switch or reconnect runs in the background.
func (r *rig) settle() {
	r.t.Helper()
	r.eventually("the switch or reconnect in the background to end", func() bool {
		r.f.mu.Lock()
		defer r.f.mu.Unlock()
		return !r.f.busy
	})
}

// eventually polls cond until it holds, however long a loaded machine
// takes; only the hang guard ends the wait.
func (r *rig) eventually(what string, cond func() bool) {
	r.t.Helper()
	guard := r.hangGuard()
	for !cond() {
		select {
		case <-guard:
			r.t.Fatalf("still waiting for %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// serves takes a sample and checks that it came from want and succeeded.
func (r *rig) serves(want string) *sample.GPUs {
	r.t.Helper()
	s, err := r.sample()
	if err != nil || s == nil || s.Backend != want || !s.Devices[0].Up {
		r.t.Fatalf("sample %+v, %v; want a good reading from %s", s, err, want)
	}
	return s
}

func switches(s *sample.GPUs) map[string]uint64 {
	m := map[string]uint64{}
	for _, sw := range s.Switches {
		m[sw.From+">"+sw.To] = sw.Count
	}
	return m
}

// The hostengine dies mid-run: DCGM rides out two failed samples, is given up
// at the third, NVML serves while DCGM is retried at a doubling interval, and
// readings go back to DCGM when it answers again. There is never more than
// one DCGM connection, and nothing is left running.
func TestFailoverFallsBackAndReturns(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := newRig(t, true)
	r.serves("dcgm")

	r.dcgm.set(func(s *service) { s.dead = true })
	for i := 1; i < DefaultFailures; i++ {
		if _, err := r.sample(); err == nil {
			t.Fatal("a dead hostengine gave a good sample")
		}
		if r.f.Name() != "dcgm" {
			t.Fatalf("gave DCGM up after %d failed samples; want %d", i, DefaultFailures)
		}
	}
	if _, err := r.sample(); err == nil {
		t.Fatal("a dead hostengine gave a good sample")
	}
	r.settle()
	s := r.serves("nvml")
	if s.Fallback == nil || s.Fallback.Preferred != "dcgm" || !strings.Contains(s.Fallback.Reason, "connection lost") {
		t.Fatalf("fallback %+v; want dcgm named with its error", s.Fallback)
	}
	if got := switches(s); got["dcgm>nvml"] != 1 || len(got) != 1 {
		t.Fatalf("switches %v", got)
	}
	if _, openNow, _, _, closes := r.dcgm.get(); openNow != 0 || closes != 1 {
		t.Fatalf("failed DCGM backend not closed: %d open, %d closed", openNow, closes)
	}

	// Still dead: one attempt after RetryMin, the next only after twice that.
	_, _, _, opens, _ := r.dcgm.get()
	r.clk.advance(29 * time.Second)
	r.serves("nvml")
	r.settle()
	if _, _, _, n, _ := r.dcgm.get(); n != opens {
		t.Fatalf("reconnected before RetryMin: %d opens", n-opens)
	}
	r.clk.advance(time.Second)
	r.serves("nvml")
	r.settle()
	if _, _, _, n, _ := r.dcgm.get(); n != opens+1 {
		t.Fatalf("%d reconnect attempts at RetryMin; want 1", n-opens)
	}
	r.clk.advance(59 * time.Second)
	r.serves("nvml")
	r.settle()
	if _, _, _, n, _ := r.dcgm.get(); n != opens+1 {
		t.Fatal("the wait did not double after a failed reconnect")
	}
	r.clk.advance(time.Second)
	r.dcgm.set(func(s *service) { s.dead = false })
	r.serves("nvml") // starts the reconnect; this sample is still NVML's
	r.settle()
	s = r.serves("dcgm")
	if s.Fallback != nil {
		t.Fatalf("back on DCGM but fallback says %+v", s.Fallback)
	}
	if got := switches(s); got["dcgm>nvml"] != 1 || got["nvml>dcgm"] != 1 {
		t.Fatalf("switches %v", got)
	}
	r.eventually("the NVML fallback to be closed after the switch back", func() bool {
		_, openNow, _, _, closes := r.nvml.get()
		return openNow == 0 && closes == 1
	})
	if _, _, maxOpen, _, _ := r.dcgm.get(); maxOpen != 1 {
		t.Fatalf("%d DCGM backends open at once; go-dcgm has one connection", maxOpen)
	}

	// After the return the wait starts from RetryMin again.
	r.dcgm.set(func(s *service) { s.dead = true })
	for range DefaultFailures {
		r.sample()
	}
	r.settle()
	r.serves("nvml")
	if err := r.f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, openNow, _, _, _ := r.nvml.get(); openNow != 0 {
		t.Fatal("Close left NVML open")
	}
}

// Failures that are not in a row do not switch: one hiccup between good
// samples is ridden out.
func TestFailoverRidesOutHiccups(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := newRig(t, true)
	defer r.f.Close()
	for range 3 {
		r.dcgm.set(func(s *service) { s.dead = true })
		for range DefaultFailures - 1 {
			r.sample()
		}
		r.dcgm.set(func(s *service) { s.dead = false })
		r.serves("dcgm")
	}
	if _, _, _, opens, _ := r.nvml.get(); opens != 0 {
		t.Fatal("NVML opened for failures that were not in a row")
	}
}

// A hostengine that hangs instead of dying: each Sample returns at its
// deadline (passed by the test once the call hangs), the hung call is not repeated, DCGM is given up after
// DefaultFailures samples all the same, and no reconnect opens a second DCGM
// connection while the hung call still holds the first.
func TestFailoverHungPrimary(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := newRig(t, true)
	hang := make(chan struct{})
	r.dcgm.set(func(s *service) { s.hang = hang })
	for i := range DefaultFailures {
		_, err := r.sample()
		if err == nil {
			t.Fatal("a hung sample succeeded")
		}
		if i > 0 && !strings.Contains(err.Error(), "still running") {
			t.Fatalf("sample %d: %v; want the hung call not to be repeated", i, err)
		}
	}
	// The fallback opens although closing DCGM waits for the hung call.
	r.eventually("the fallback while DCGM hangs", func() bool { return r.f.Name() == "nvml" })
	r.serves("nvml")
	r.clk.advance(time.Hour)
	r.serves("nvml")
	if _, _, _, opens, _ := r.dcgm.get(); opens != 1 {
		t.Fatal("reopened DCGM while the old connection was still held by a hung call")
	}
	r.dcgm.set(func(s *service) { s.hang = nil })
	close(hang)
	r.settle() // the old DCGM is closed now
	r.clk.advance(time.Hour)
	r.serves("nvml")
	r.settle()
	r.serves("dcgm")
	if _, _, maxOpen, _, _ := r.dcgm.get(); maxOpen != 1 {
		t.Fatalf("%d DCGM backends open at once", maxOpen)
	}
	if err := r.f.Close(); err != nil {
		t.Fatal(err)
	}
}

// Forced DCGM (no fallback): the collector fails while the hostengine is
// gone, says why, and reads through DCGM again once it returns.
func TestFailoverWithoutFallbackReconnects(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := newRig(t, false)
	defer r.f.Close()
	r.dcgm.set(func(s *service) { s.dead = true })
	for range DefaultFailures {
		r.sample()
	}
	r.settle()
	_, err := r.sample()
	if err == nil || !strings.Contains(err.Error(), "dcgm down since") || r.f.Name() != "none" {
		t.Fatalf("%v (serving %s); want an error naming the outage", err, r.f.Name())
	}
	r.dcgm.set(func(s *service) { s.dead = false })
	r.clk.advance(30 * time.Second)
	r.sample()
	r.settle()
	s := r.serves("dcgm")
	if got := switches(s); got["dcgm>none"] != 1 || got["none>dcgm"] != 1 {
		t.Fatalf("switches %v", got)
	}
	if _, _, _, opens, _ := r.nvml.get(); opens != 0 {
		t.Fatal("opened a fallback in forced mode")
	}
}

// When the fallback cannot open either, nothing serves and both are retried
// on the reconnect schedule; the fallback takes over when it opens first.
func TestFailoverFallbackOpensLater(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := newRig(t, true)
	defer r.f.Close()
	r.dcgm.set(func(s *service) { s.dead = true })
	r.nvml.set(func(s *service) { s.dead = true })
	for range DefaultFailures {
		r.sample()
	}
	r.settle()
	if _, err := r.sample(); err == nil || r.f.Name() != "none" {
		t.Fatalf("%v, serving %s; want nothing serving", err, r.f.Name())
	}
	r.nvml.set(func(s *service) { s.dead = false })
	r.clk.advance(30 * time.Second)
	r.sample()
	r.settle()
	s := r.serves("nvml")
	if got := switches(s); got["dcgm>none"] != 1 || got["none>nvml"] != 1 {
		t.Fatalf("switches %v", got)
	}
}
