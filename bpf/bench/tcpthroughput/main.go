// Command tcpthroughput measures loopback TCP throughput: one connection,
// a writer sending fixed-size writes for a while and a reader draining it,
// as iperf3 does. It prints the received rate in Mbit/s.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	seconds := flag.Float64("seconds", 5, "how long to send")
	size := flag.Int("write-size", 128<<10, "bytes per write")
	flag.Parse()
	mbps, err := measure(time.Duration(*seconds*float64(time.Second)), *size)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpthroughput:", err)
		os.Exit(1)
	}
	fmt.Printf("%.0f\n", mbps)
}

func measure(d time.Duration, size int) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	type result struct {
		n   int64
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		start := time.Now()
		n, err := io.CopyBuffer(io.Discard, conn, make([]byte, size))
		done <- result{n, time.Since(start), err}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	buf := make([]byte, size)
	for end := time.Now().Add(d); time.Now().Before(end); {
		if _, err := conn.Write(buf); err != nil {
			return 0, err
		}
	}
	conn.Close()
	r := <-done
	if r.err != nil {
		return 0, r.err
	}
	return float64(r.n) * 8 / r.d.Seconds() / 1e6, nil
}
