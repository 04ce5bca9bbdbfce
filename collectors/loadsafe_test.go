package collectors

import (
	"testing"
	"time"
)

// What the tests of this package wait for, they wait for without a limit
// of their own: the suite runs on loaded machines (CI beside other
// packages, -race), where a sample that takes milliseconds alone can take
// seconds. A test judges what a collector did, never how fast.

// testEngineInterval is the engine interval of the tests that sample
// through an engine to judge what it exports or reports. The engine
// derives from it the sample's timeout (at most the interval) and how
// long a sample is served (two intervals and the timeout): an hour, so
// that no stall of a loaded machine fails a good sample or ages it out
// before the scrape that judges it. Tests of the timeout itself use a
// call that hangs, and tests of staleness a clock of their own.
const testEngineInterval = time.Hour

// hangGuard fires shortly before the test binary's -timeout would end the
// run, or never where there is none. It tells a call that never returns
// (a read blocked on a FIFO, a scrape behind a hung driver call) from one
// that is slow, without a limit of its own: it fails nothing the timeout
// would not have failed, and says what was blocked rather than leaving
// only the timeout's stack dump.
func hangGuard(t *testing.T) <-chan time.Time {
	if _, ok := t.Deadline(); !ok {
		return nil
	}
	return time.After(untilHang(t))
}

// untilHang is how long from now hangGuard waits, as a duration for what
// takes one (an engine's sample deadline): a day where the test binary
// has no timeout.
func untilHang(t *testing.T) time.Duration {
	d, ok := t.Deadline()
	if !ok {
		return 24 * time.Hour
	}
	left := time.Until(d)
	return left - min(left/10, 30*time.Second)
}
