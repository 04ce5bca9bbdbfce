package analyzers

import (
	"fmt"
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// The rdma_transport_errors check: the HCA's transport (queue pair)
// counters, which mlx5 keeps in hw_counters beside the link counters that
// ib_port_errors reads. A link error costs a packet; these say what it cost
// the connections above it: a work request failed, a packet was sent again,
// a receiver was not ready. local_ack_timeout_err, a retransmission too, is
// ib_port_errors' (its alert has always counted it) and is not repeated here.

// rdmaTransportFamily is one family of transport counters and what their
// growth in the span means. The family's counters are summed; where less is
// set, its counter of the same index is the part not to count.
type rdmaTransportFamily struct {
	kind     string
	severity Severity
	counters []sample.InfiniBandCounter
	less     []sample.InfiniBandCounter
	// summary is a Sprintf format taking the port, the count and the
	// counters that grew.
	summary string
	fix     string
}

// rdmaTransportFamilies are the families, one finding kind each. Only the
// two that mean a job is failing or slowed by loss are warnings; the
// others have innocent causes often enough to be worth a look, not a page.
var rdmaTransportFamilies = []rdmaTransportFamily{
	{
		// A work request that completed with an error broke its queue
		// pair. Flushed completions are left out: tearing down a queue
		// pair flushes the receives it still held, which every job does at
		// its end (NVIDIA's adapter counter notes say so of responder CQE
		// errors), and a queue pair that broke flushes the rest of its
		// work after the one error worth counting. The flushed ones are
		// counted within the CQE errors, so the difference is the failures.
		kind: "completion_errors", severity: SeverityWarning,
		counters: []sample.InfiniBandCounter{sample.IBReqCQEErrors, sample.IBRespCQEErrors},
		less:     []sample.InfiniBandCounter{sample.IBReqCQEFlushErrors, sample.IBRespCQEFlushErrors},
		summary: "port %s completed %.0f work request(s) with an error in the span (%s; flushed ones not counted): an RDMA connection broke, " +
			"and a job using it fails (NCCL: \"NET/IB : Got completion ... with error\") unless its peer had died first",
		fix: "read the job's log for the completion status (NCCL prints it with the vendor error): 12 (transport retry exceeded) means the peer stopped answering: " +
			"check that node, then the links between (ib_port_errors here and there, mlxlink -c, ibdiagnet); 10 (remote access) or 4 (local protection) is a " +
			"memory registration of the job or of a peer, not the fabric",
	},
	{
		// Sent again: adaptively before the ACK timeout (RoCE), on a NAK
		// for a gap the receiver saw, or on a response that skipped ahead.
		kind: "retransmissions", severity: SeverityWarning,
		counters: []sample.InfiniBandCounter{sample.IBAdaptiveRetransmissions, sample.IBAdaptiveRetransTimeouts,
			sample.IBPacketSequenceErrors, sample.IBImpliedNAKSequenceErrors},
		summary: "port %s retransmitted %.0f time(s) in the span (%s): packets between it and its peers are being lost, " +
			"and each loss stalls that connection until the resend arrives",
		fix: "find where packets drop: on InfiniBand, errors on the links of the path (ib_port_errors here and on the peers, ibdiagnet, the switch ports); " +
			"on RoCE, check that the traffic class NCCL uses (NCCL_IB_TC) is lossless on the NIC and every switch hop (PFC: mlnx_qos) with ECN on, " +
			"and the switches' drop counters",
	},
	{
		// Receiver not ready: a peer had no receive posted, and this
		// sender waited the RNR timer before trying again.
		kind: "rnr_naks", severity: SeverityInfo,
		counters: []sample.InfiniBandCounter{sample.IBRNRNAKs},
		summary:  "port %s received %.0f receiver-not-ready NAK(s) in the span (%s): a peer had no receive posted, and this sender waited before retrying",
		fix: "a peer process posts its receives late: check the peers' CPU load (a starved or stopped NCCL proxy thread); for storage over RDMA " +
			"(NFS, Lustre, GPUDirect Storage) check the server",
	},
	{
		// The receiver's view of loss. Adaptive routing (InfiniBand AR,
		// Spectrum-X) delivers packets out of order by design, so alone
		// it is no proof of a fault; the senders' retransmissions are.
		kind: "sequence_errors", severity: SeverityInfo,
		counters: []sample.InfiniBandCounter{sample.IBOutOfSequence, sample.IBDuplicateRequests},
		summary:  "port %s received %.0f packet(s) out of sequence or twice in the span (%s): a packet before them was lost, or adaptive routing reordered them",
		fix: "alone not a fault where the fabric routes adaptively; with retransmissions on the peers (rdma_transport_errors, kind retransmissions) " +
			"it is loss: find it as for them",
	},
}

// rdmaTransportCounters are every counter the families read.
func rdmaTransportCounters() []sample.InfiniBandCounter {
	var out []sample.InfiniBandCounter
	for _, f := range rdmaTransportFamilies {
		out = append(append(out, f.counters...), f.less...)
	}
	return out
}

// auditRDMATransport reports, per port and family, the transport counters'
// growth over the span's readings (sample/span.go: a counter that went back
// was reset and counts from zero). A counter the HCA does not expose is not
// followed; a CQE error counter without its flushed counter is not counted,
// since the failures cannot be told from a job's ordinary teardown.
func auditRDMATransport(readings []*sample.InfiniBand) []Finding {
	var out []Finding
	for _, pe := range spanIBCounters(readings, rdmaTransportCounters()) {
		for _, f := range rdmaTransportFamilies {
			if finding, ok := f.finding(pe); ok {
				out = append(out, finding)
			}
		}
	}
	return out
}

// finding is the family's finding for one port, false when none of its
// counters grew.
func (f rdmaTransportFamily) finding(pe *ibPortErrors) (Finding, bool) {
	var total float64
	var evidence []Evidence
	var grew []string
	for i, c := range f.counters {
		sc := pe.counters[c]
		if sc == nil {
			continue
		}
		n, signal := sc.Increase(), string(c)
		if f.less != nil {
			flushed := pe.counters[f.less[i]]
			if flushed == nil {
				continue
			}
			n, signal = max(0, n-flushed.Increase()), signal+"_not_flushed"
		}
		if n <= 0 {
			continue
		}
		total += n
		grew = append(grew, fmt.Sprintf("%s %.0f", c, n))
		evidence = append(evidence, Evidence{Signal: signal, Value: n, Op: ">", Threshold: 0})
	}
	if total == 0 {
		return Finding{}, false
	}
	return Finding{Check: "rdma_transport_errors", Severity: f.severity, Device: pe.name, Kind: f.kind,
		Summary:  fmt.Sprintf(f.summary, pe.name, total, strings.Join(grew, ", ")),
		Evidence: evidence,
		Fix:      f.fix}, true
}
