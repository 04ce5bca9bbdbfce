package main

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
)

// recorder appends every successful sample to a record file. A write that
// fails (a full disk) is counted and the sample dropped; the daemon keeps
// serving and every later sample tries again, so recording resumes by itself
// when space comes back. The failure is logged when it starts, once per
// recordLogEvery while it lasts, and when it ends.
type recorder struct {
	mu  sync.Mutex
	w   *record.Writer
	log *zap.Logger
	// write is w.Write; tests put a full disk in front of it.
	write func(collector string, t time.Time, s any) error
	now   func() time.Time

	// drops counts what Collect drops (the engine's, which exports it);
	// nil counts nothing.
	drops *engine.Drops

	errors   uint64
	failing  bool
	lost     uint64    // samples dropped in the current failure
	loggedAt time.Time // when the current failure was last logged
}

// recordLogEvery bounds the log lines of a lasting record failure.
const recordLogEvery = time.Minute

func newRecorder(w *record.Writer, log *zap.Logger) *recorder {
	return &recorder{w: w, log: log, write: w.Write, now: time.Now}
}

func (r *recorder) OnSample(collector string, t time.Time, s any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.write(collector, t, s)
	if err == nil {
		if r.failing {
			r.log.Info("recording resumed", zap.Uint64("samples_lost", r.lost))
			r.failing = false
		}
		return
	}
	r.errors++
	now := r.now()
	switch {
	case !r.failing:
		r.failing, r.lost, r.loggedAt = true, 1, now
		r.log.Warn("recording failed; the daemon keeps serving and retries with every sample", zap.Error(err))
	case now.Sub(r.loggedAt) >= recordLogEvery:
		r.lost++
		r.loggedAt = now
		r.log.Warn("recording still failing", zap.Error(err), zap.Uint64("samples_lost", r.lost))
	default:
		r.lost++
	}
}

func (r *recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Close()
}

var (
	recordBytesDesc  = prometheus.NewDesc("gpudiag_record_written_bytes_total", "Bytes appended to the --record file.", nil, nil)
	recordFramesDesc = prometheus.NewDesc("gpudiag_record_samples_total", "Samples appended to the --record file.", nil, nil)
	recordErrorsDesc = prometheus.NewDesc("gpudiag_record_errors_total", "Samples that could not be appended to the --record file (e.g. disk full).", nil, nil)
	recordOKDesc     = prometheus.NewDesc("gpudiag_record_success", "Whether the last sample was appended to the --record file (1) or could not be (0).", nil, nil)
)

func (r *recorder) Describe(ch chan<- *prometheus.Desc) {
	ch <- recordBytesDesc
	ch <- recordFramesDesc
	ch <- recordErrorsDesc
	ch <- recordOKDesc
}

// Collect runs on client_golang's gather goroutine, where a panic would end
// the daemon: under the engine's Guard, which drops and counts a series
// that cannot be made and recovers a panic.
func (r *recorder) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drops.Guard("recorder", ch, func(emit engine.ConstEmit) {
		emit(recordBytesDesc, prometheus.CounterValue, float64(r.w.Bytes))
		emit(recordFramesDesc, prometheus.CounterValue, float64(r.w.Frames))
		emit(recordErrorsDesc, prometheus.CounterValue, float64(r.errors))
		emit(recordOKDesc, prometheus.GaugeValue, boolFloat(!r.failing))
	})
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
