// Command syscallcost measures what the Go runtime adds to calls that leave
// Go for a while, as the daemon's NVML calls (cgo, busy in the driver) and
// /proc reads (system calls) do: once a second, one goroutine makes N calls
// of D nanoseconds each, either a C function that spins (CGO=1) or a
// nanosleep system call that blocks; after 20 s it prints the process's CPU
// time and context switches per second from the scheduler's counters of its
// threads. Compare against N=0 for the process's own floor, and run it at
// GOMAXPROCS=1 and 2:
//
//	cd scripts/bench/syscallcost && CGO_ENABLED=1 go build -o /tmp/syscallcost .
//	N=20 D=150000 CGO=1 GOMAXPROCS=1 /tmp/syscallcost
//
// It has a module of its own so that the daemon's build and tests leave it out.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Getenv("N"))
	d, _ := strconv.Atoi(os.Getenv("D"))
	inC := os.Getenv("CGO") != ""
	const secs = 20
	end := time.Now().Add(secs * time.Second)
	tick := time.NewTicker(time.Second)
	for time.Now().Before(end) {
		<-tick.C
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range n {
				if inC {
					spin(d)
				} else {
					ts := syscall.NsecToTimespec(int64(d))
					_ = syscall.Nanosleep(&ts, nil)
				}
			}
		}()
		<-done
	}
	var switches, cpuNs int
	tasks, _ := filepath.Glob("/proc/self/task/*")
	for _, task := range tasks {
		status, _ := os.ReadFile(task + "/status")
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "voluntary_ctxt_switches:") || strings.HasPrefix(line, "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.Atoi(strings.Fields(line)[1])
				switches += v
			}
		}
		schedstat, _ := os.ReadFile(task + "/schedstat")
		if f := strings.Fields(string(schedstat)); len(f) > 0 {
			v, _ := strconv.Atoi(f[0])
			cpuNs += v
		}
	}
	fmt.Printf("GOMAXPROCS=%s N=%d D=%dns cgo=%v: %d threads, %.1f context switches/s, CPU %.4f%% of a core\n",
		os.Getenv("GOMAXPROCS"), n, d, inC, len(tasks), float64(switches)/secs, float64(cpuNs)/1e9/secs*100)
}
