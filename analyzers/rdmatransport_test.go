package analyzers

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

// ibTransportReading is one reading of port mlx5_0/1 with the given
// counters.
func ibTransportReading(counters map[sample.InfiniBandCounter]uint64) *sample.InfiniBand {
	return &sample.InfiniBand{Ports: []sample.InfiniBandPort{{Device: "mlx5_0", Port: 1, StateID: 4, LinkLayer: "Ethernet", Counters: counters}}}
}

func TestRDMATransportErrors(t *testing.T) {
	type counters = map[sample.InfiniBandCounter]uint64
	cqe := func(req, reqFlush, resp, respFlush uint64) counters {
		return counters{sample.IBReqCQEErrors: req, sample.IBReqCQEFlushErrors: reqFlush, sample.IBRespCQEErrors: resp, sample.IBRespCQEFlushErrors: respFlush}
	}
	for _, tc := range []struct {
		name     string
		readings []counters
		want     []Evidence // of the one finding, nil for none
		kind     string
		severity Severity
	}{
		{"flat", []counters{cqe(10, 2, 30, 20), cqe(10, 2, 30, 20)}, nil, "", ""},
		{"one reading has no increase", []counters{cqe(10, 2, 30, 20)}, nil, "", ""},
		{"requester failures, net of the flushed", []counters{cqe(10, 2, 30, 20), cqe(15, 4, 30, 20)},
			[]Evidence{{Signal: "req_cqe_error_not_flushed", Value: 3, Op: ">", Threshold: 0}}, "completion_errors", SeverityWarning},
		{"both sides", []counters{cqe(10, 2, 30, 20), cqe(11, 2, 32, 21), cqe(12, 2, 32, 21)},
			[]Evidence{{Signal: "req_cqe_error_not_flushed", Value: 2, Op: ">", Threshold: 0}, {Signal: "resp_cqe_error_not_flushed", Value: 1, Op: ">", Threshold: 0}},
			"completion_errors", SeverityWarning},
		// A job's end flushes the receives it had posted: every CQE error
		// is a flushed one.
		{"teardown flushes only", []counters{cqe(10, 2, 30, 20), cqe(10, 2, 542, 532)}, nil, "", ""},
		// A CQE error counter whose flushed part is not exposed cannot be
		// told from a teardown.
		{"no flushed counter", []counters{{sample.IBReqCQEErrors: 10}, {sample.IBReqCQEErrors: 90}}, nil, "", ""},
		{"reset to zero", []counters{cqe(10, 2, 30, 20), cqe(0, 0, 0, 0), cqe(0, 0, 0, 0)}, nil, "", ""},
		// Counted from zero after the reset (sample/span.go): 4 failures
		// since, of which 1 flushed.
		{"reset, then failures", []counters{cqe(10, 2, 30, 20), cqe(4, 1, 0, 0)},
			[]Evidence{{Signal: "req_cqe_error_not_flushed", Value: 3, Op: ">", Threshold: 0}}, "completion_errors", SeverityWarning},
		{"retransmissions", []counters{{sample.IBAdaptiveRetransmissions: 99, sample.IBPacketSequenceErrors: 1, sample.IBLocalAckTimeoutErrors: 0},
			{sample.IBAdaptiveRetransmissions: 140, sample.IBPacketSequenceErrors: 1, sample.IBLocalAckTimeoutErrors: 0}},
			[]Evidence{{Signal: "roce_adp_retrans", Value: 41, Op: ">", Threshold: 0}}, "retransmissions", SeverityWarning},
		// An ACK timeout is ib_port_errors' alone.
		{"ACK timeouts are not repeated", []counters{{sample.IBLocalAckTimeoutErrors: 1}, {sample.IBLocalAckTimeoutErrors: 9}}, nil, "", ""},
		{"receiver not ready", []counters{{sample.IBRNRNAKs: 0}, {sample.IBRNRNAKs: 6}},
			[]Evidence{{Signal: "rnr_nak_retry_err", Value: 6, Op: ">", Threshold: 0}}, "rnr_naks", SeverityInfo},
		{"out of sequence", []counters{{sample.IBOutOfSequence: 1, sample.IBDuplicateRequests: 41}, {sample.IBOutOfSequence: 5, sample.IBDuplicateRequests: 43}},
			[]Evidence{{Signal: "out_of_sequence", Value: 4, Op: ">", Threshold: 0}, {Signal: "duplicate_request", Value: 2, Op: ">", Threshold: 0}},
			"sequence_errors", SeverityInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var readings []*sample.InfiniBand
			for _, c := range tc.readings {
				readings = append(readings, ibTransportReading(c))
			}
			var got []Finding
			for _, f := range Audit(AuditInput{IBReadings: readings, LastIB: readings[len(readings)-1]}) {
				if f.Check == "rdma_transport_errors" {
					got = append(got, f)
				}
			}
			if tc.want == nil {
				if len(got) != 0 {
					t.Fatalf("findings %+v; want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("findings %+v; want one", got)
			}
			f := got[0]
			if f.Kind != tc.kind || f.Severity != tc.severity || f.Device != "mlx5_0/1" || f.Fix == "" || !strings.HasPrefix(f.Summary, "port mlx5_0/1 ") {
				t.Errorf("finding %+v", f)
			}
			if !reflect.DeepEqual(f.Evidence, tc.want) {
				t.Errorf("evidence %+v; want %+v", f.Evidence, tc.want)
			}
		})
	}
}

// A port that went away in the span still reports what it counted, and
// each port and family is its own finding.
func TestRDMATransportErrorsPerPort(t *testing.T) {
	two := func(a, b uint64) *sample.InfiniBand {
		return &sample.InfiniBand{Ports: []sample.InfiniBandPort{
			{Device: "mlx5_0", Port: 1, Counters: map[sample.InfiniBandCounter]uint64{sample.IBAdaptiveRetransmissions: a, sample.IBRNRNAKs: a}},
			{Device: "mlx5_1", Port: 1, Counters: map[sample.InfiniBandCounter]uint64{sample.IBAdaptiveRetransmissions: b}},
		}}
	}
	gone := &sample.InfiniBand{Ports: []sample.InfiniBandPort{{Device: "mlx5_1", Port: 1, Counters: map[sample.InfiniBandCounter]uint64{sample.IBAdaptiveRetransmissions: 7}}}}
	var got []string
	for _, f := range Audit(AuditInput{IBReadings: []*sample.InfiniBand{two(1, 7), two(3, 7), gone}, LastIB: gone}) {
		if f.Check == "rdma_transport_errors" {
			got = append(got, f.Device+" "+f.Kind)
		}
	}
	want := "mlx5_0/1 retransmissions,mlx5_0/1 rnr_naks"
	if strings.Join(got, ",") != want {
		t.Fatalf("findings %v; want %s", got, want)
	}
}

// A lone InfiniBand port at 1X is degraded by its width, and the finding
// says so with the width as evidence; a port slower than its peers keeps
// the rate's wording.
func TestIBPortDegradedByWidth(t *testing.T) {
	lone := &sample.InfiniBand{Ports: []sample.InfiniBandPort{{Device: "mlx5_0", Port: 1, LinkLayer: "InfiniBand", StateID: 4,
		RateBytesPerSecond: 25e9 / 8, LinkWidth: 1, LinkSpeed: "EDR", RateDegraded: true}}}
	f := findingOf(t, Audit(AuditInput{LastIB: lone}), "ib_port_degraded")
	if !strings.Contains(f.Summary, "port mlx5_0/1 trained at 1X EDR (25 Gb/s)") || !strings.Contains(f.Summary, "(4X)") {
		t.Errorf("summary %q", f.Summary)
	}
	if want := (Evidence{Signal: "link_width", Value: 1, Unit: "lanes", Op: "<", Threshold: 4}); !reflect.DeepEqual(f.Evidence, []Evidence{want}) {
		t.Errorf("evidence %+v", f.Evidence)
	}

	hdr := &sample.InfiniBand{Ports: []sample.InfiniBandPort{{Device: "mlx5_0", Port: 1, LinkLayer: "InfiniBand", StateID: 4,
		RateBytesPerSecond: 50e9 / 8, LinkWidth: 1, LinkSpeed: "HDR", RateDegraded: true}}}
	if f := findingOf(t, Audit(AuditInput{LastIB: hdr}), "ib_port_degraded"); !strings.Contains(f.Summary, "(4X, or 2X on a splitter cable)") {
		t.Errorf("summary %q", f.Summary)
	}

	slower := &sample.InfiniBand{Ports: []sample.InfiniBandPort{{Device: "mlx5_2", Port: 1, LinkLayer: "InfiniBand", StateID: 4,
		RateBytesPerSecond: 200e9 / 8, LinkWidth: 4, LinkSpeed: "HDR", RateDegraded: true}}}
	if f := findingOf(t, Audit(AuditInput{LastIB: slower}), "ib_port_degraded"); f.Summary != "port mlx5_2/1 runs at 200 Gb/s, below its peers" {
		t.Errorf("summary %q", f.Summary)
	}
}

// findingOf returns the one finding of check among fs.
func findingOf(t *testing.T, fs []Finding, check string) Finding {
	t.Helper()
	var out []Finding
	for _, f := range fs {
		if f.Check == check {
			out = append(out, f)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d %s findings in %+v; want one", len(out), check, fs)
	}
	return out[0]
}
