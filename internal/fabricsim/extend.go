package fabricsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/record"
)

// readBase reads every frame of a recorded trace.
func readBase(path string) ([]record.Frame, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := record.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []record.Frame
	for {
		fr, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, fr)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no frames", path)
	}
	return out, nil
}

// extend returns the base's frames over the scenario's duration: cut when
// shorter than the base, and when longer, the frames before Loop.To
// followed by copies of the frames in [Loop.From, Loop.To), each shifted
// by the loop's length, until the duration is reached.
//
// A repeated frame's counters are carried on so that they never go back
// (the daemon treats a counter going back as a reset): a numeric value
// that never decreases over the loop's frames of its collector and rises
// across it is a counter, and copy k adds k times its rise over one loop
// (the rise from the loop's first to its last frame, times frames/(frames-1)
// for the step back to the first). Values under rates, ratios and
// intervals, and gauges (temperature, power, clocks, memory in use), are
// never counters even when they happen to rise. Per-sample rates are the
// recorded ones, unchanged.
func extend(base []record.Frame, duration float64, loop *Loop) ([]record.Frame, error) {
	t0 := base[0].UnixNano
	for _, f := range base {
		t0 = min(t0, f.UnixNano)
	}
	end := t0
	for _, f := range base {
		end = max(end, f.UnixNano)
	}
	baseSpan := float64(end-t0) / 1e9
	if duration == 0 {
		return base, nil
	}
	limit := t0 + int64(duration*1e9)
	if duration <= baseSpan {
		var out []record.Frame
		for _, f := range base {
			if f.UnixNano <= limit {
				out = append(out, f)
			}
		}
		return out, nil
	}
	if loop == nil {
		return nil, fmt.Errorf("duration_s %.0f is longer than the base (%.1f s): set loop", duration, baseSpan)
	}
	if loop.ToSeconds > baseSpan+1 {
		return nil, fmt.Errorf("loop.to_s %.1f is past the base's end (%.1f s)", loop.ToSeconds, baseSpan)
	}
	from, to := t0+int64(loop.FromSeconds*1e9), t0+int64(loop.ToSeconds*1e9)
	period := to - from
	var out, seg []record.Frame
	for _, f := range base {
		if f.UnixNano < to {
			out = append(out, f)
		}
		if f.UnixNano >= from && f.UnixNano < to {
			seg = append(seg, f)
		}
	}
	rises, err := loopRises(seg)
	if err != nil {
		return nil, err
	}
	for k := int64(1); ; k++ {
		added := false
		for _, f := range seg {
			t := f.UnixNano + k*period
			if t > limit {
				continue
			}
			s, err := offsetCounters(f.Sample, rises[f.Collector], float64(k))
			if err != nil {
				return nil, fmt.Errorf("%s frame: %w", f.Collector, err)
			}
			out = append(out, record.Frame{Collector: f.Collector, UnixNano: t, Sample: s})
			added = true
		}
		if !added {
			break
		}
	}
	return out, nil
}

// leaves flattens a JSON sample into path → number (json.Number text).
func leaves(raw []byte) (map[string]json.Number, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	out := map[string]json.Number{}
	var walk func(string, any)
	walk = func(p string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(p+"/"+k, e)
			}
		case []any:
			for i, e := range x {
				walk(p+"/"+strconv.Itoa(i), e)
			}
		case json.Number:
			out[p] = x
		}
	}
	walk("", v)
	return out, nil
}

// Counter detection: a value is never a counter when a path element is one
// of notCounterParent (rates, ratios and intervals), when its key is one of
// notCounterKey (identifiers, sizes) or contains one of notCounterPart
// (gauges), unless the key ends in "_total".
var (
	notCounterParent = map[string]bool{"rates": true, "ratios": true, "interval": true, "allocations_per_second": true,
		"queue": true, "topology": true}
	notCounterKey = map[string]bool{"node": true, "numa_node": true, "peer_node": true, "gpu": true, "index": true,
		"link": true, "port": true, "major": true, "minor": true, "pid": true, "ppid": true, "ns_pid": true, "mtu": true,
		"cpus": true, "local_cpus": true, "online_cpus": true, "distance": true, "sockets_listed": true, "maps_read": true,
		"start_ticks": true, "connections": true, "tcp_sockets": true, "speed_bps": true, "lines": true}
	notCounterPart = []string{"per_second", "_bps", "ratio", "avg", "temperature", "watts", "clock", "memory_used",
		"available", "cached", "dirty", "writeback", "free", "in_flight", "procs_", "threads", "utilization", "_active",
		"age", "limit", "_max", "width", "_gen", "resident", "unread", "dropped", "interval", "occupancy"}
)

func isCounterPath(p string) bool {
	parts := strings.Split(p, "/")
	key := ""
	for i := len(parts) - 1; i >= 0; i-- {
		if _, err := strconv.Atoi(parts[i]); err != nil {
			key = parts[i]
			break
		}
	}
	for _, e := range parts[:max(len(parts)-1, 0)] {
		if notCounterParent[e] {
			return false
		}
	}
	if strings.HasSuffix(key, "_total") {
		return true
	}
	if notCounterKey[key] {
		return false
	}
	for _, n := range notCounterPart {
		if strings.Contains(key, n) {
			return false
		}
	}
	return true
}

// loopRises finds, per collector, the counters of the loop's frames and
// their rise over one loop.
func loopRises(seg []record.Frame) (map[string]map[string]float64, error) {
	byColl := map[string][]map[string]json.Number{}
	var order []string
	for _, f := range seg {
		l, err := leaves(f.Sample)
		if err != nil {
			return nil, fmt.Errorf("%s frame: %w", f.Collector, err)
		}
		if _, ok := byColl[f.Collector]; !ok {
			order = append(order, f.Collector)
		}
		byColl[f.Collector] = append(byColl[f.Collector], l)
	}
	out := map[string]map[string]float64{}
	for _, c := range order {
		fs := byColl[c]
		rises := map[string]float64{}
		if len(fs) >= 2 {
			for p, n0 := range fs[0] {
				if !isCounterPath(p) {
					continue
				}
				prev, err := n0.Float64()
				if err != nil {
					continue
				}
				first, mono := prev, true
				for _, l := range fs[1:] {
					n, ok := l[p]
					if !ok {
						mono = false
						break
					}
					x, err := n.Float64()
					if err != nil || x < prev {
						mono = false
						break
					}
					prev = x
				}
				if mono && prev > first {
					m := float64(len(fs))
					rises[p] = (prev - first) * m / (m - 1)
				}
			}
		}
		out[c] = rises
	}
	return out, nil
}

// offsetCounters adds k × rise to each counter of a sample.
func offsetCounters(raw json.RawMessage, rises map[string]float64, k float64) (json.RawMessage, error) {
	if len(rises) == 0 {
		return raw, nil
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	var walk func(string, any) any
	walk = func(p string, v any) any {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, key := range keys {
				x[key] = walk(p+"/"+key, x[key])
			}
			return x
		case []any:
			for i, e := range x {
				x[i] = walk(p+"/"+strconv.Itoa(i), e)
			}
			return x
		case json.Number:
			r, ok := rises[p]
			if !ok {
				return x
			}
			// Integer counters stay integers (rises of integers are
			// whole up to the frames/(frames-1) step, which is rounded);
			// a float that happens to print whole ("0") is not one.
			if i, err := strconv.ParseUint(string(x), 10, 64); err == nil && r >= 1 {
				return json.Number(strconv.FormatUint(i+uint64(math.Round(k*r)), 10))
			}
			f, err := x.Float64()
			if err != nil {
				return x
			}
			return json.Number(strconv.FormatFloat(f+k*r, 'g', -1, 64))
		}
		return v
	}
	v = walk("", v)
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}

var errNoGPU = errors.New("base has no gpu frame with devices")
