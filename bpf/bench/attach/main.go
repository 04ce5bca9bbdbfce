// Command attach loads gpudiag's eBPF programs as the daemon does, tracks
// one process as if it ran on a GPU, prints "attached" and holds the
// programs until SIGINT or SIGTERM. The kernel then tracks every process the
// tracked one starts, so bench.sh runs its workloads as children of a
// tracked shell. On exit it prints what the programs counted, which shows
// they saw the workloads. With -stats it turns the kernel's BPF run-time
// statistics on and also prints the programs' total run time, which
// bench.sh sets against the CPU time the workload took.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpudiag/gpudiag/bpf"
)

func main() {
	track := flag.Int("track", 0, "PID to track as a GPU process (0: none, so only the disk histograms count)")
	stats := flag.Bool("stats", false, "measure the programs' run time and print it on exit")
	flag.Parse()
	if err := run(uint32(*track), *stats); err != nil {
		fmt.Fprintln(os.Stderr, "attach:", err)
		os.Exit(1)
	}
}

func run(track uint32, stats bool) error {
	if stats {
		closer, err := bpf.EnableRunStats()
		if err != nil {
			return err
		}
		defer closer.Close()
	}
	tracker, err := bpf.LoadTracker()
	if err != nil {
		return err
	}
	defer tracker.Close()
	block, err := bpf.LoadBlockIO(tracker)
	if err != nil {
		return err
	}
	defer block.Close()
	tcp, err := bpf.LoadTCP(tracker)
	if err != nil {
		return err
	}
	defer tcp.Close()
	if track != 0 {
		if err := tracker.Track(track, track); err != nil {
			return err
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	fmt.Printf("attached: block I/O owner at %s, TCP at %s\n", block.OwnerHook(), tcp.Hook())
	// As the daemon does each cycle: time at issue the disks found to
	// complete requests without the kernel's stamp.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-sig:
			break wait
		case <-tick.C:
			devs, err := block.TimeUnstampedDisks()
			if err != nil {
				return err
			}
			if len(devs) > 0 {
				fmt.Fprintf(os.Stderr, "block_rq_issue attached for disks without the kernel's issue stamp: %v\n", devs)
			}
		}
	}

	var timed uint64
	disks, err := block.DiskLatencies()
	if err != nil {
		return err
	}
	for _, d := range disks {
		for _, n := range d.Slots {
			timed += n
		}
	}
	ios, err := block.ProcessIO()
	if err != nil {
		return err
	}
	var reqs, bytes uint64
	for _, io := range ios {
		reqs += io.Requests
		bytes += io.Bytes
	}
	traffic, err := tcp.Traffic()
	if err != nil {
		return err
	}
	var sent, received uint64
	for _, t := range traffic {
		sent += t.Sent
		received += t.Received
	}
	fmt.Fprintf(os.Stderr, "counted: %d requests timed on all disks; tracked processes: %d requests, %d bytes of block I/O, %d bytes TCP sent, %d received\n",
		timed, reqs, bytes, sent, received)
	if stats {
		return printRunTime(tracker, block, tcp)
	}
	return nil
}

// printRunTime prints each program that ran, then "bpf_run_ns N": the
// programs' total run time, the line bench.sh reads.
func printRunTime(sources ...interface {
	ProgramStats() ([]bpf.ProgramStats, error)
}) error {
	var total int64
	for _, src := range sources {
		stats, err := src.ProgramStats()
		if err != nil {
			return err
		}
		for _, st := range stats {
			if st.Runs == 0 {
				continue
			}
			fmt.Printf("%-26s %10d runs %6.0f ns/run\n", st.Name, st.Runs, float64(st.Runtime.Nanoseconds())/float64(st.Runs))
			total += st.Runtime.Nanoseconds()
		}
	}
	fmt.Printf("bpf_run_ns %d\n", total)
	return nil
}
