// Command attach loads gpudiag's eBPF programs as the daemon does, tracks
// one process as if it ran on a GPU, prints "attached" and holds the
// programs until SIGINT or SIGTERM. The kernel then tracks every process the
// tracked one starts, so bench.sh runs its workloads as children of a
// tracked shell. On exit it prints what the programs counted, which shows
// they saw the workloads.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpudiag/gpudiag/bpf"
)

func main() {
	track := flag.Int("track", 0, "PID to track as a GPU process (0: none, so only the disk histograms count)")
	flag.Parse()
	if err := run(uint32(*track)); err != nil {
		fmt.Fprintln(os.Stderr, "attach:", err)
		os.Exit(1)
	}
}

func run(track uint32) error {
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
	<-sig

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
	return nil
}
