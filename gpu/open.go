package gpu

import (
	"strings"
	"time"

	"go.uber.org/zap"
)

// Modes of Open, as --collector.gpu.backend names them.
const (
	// ModeAuto prefers DCGM and falls back to NVML, at start and when the
	// hostengine dies mid-run. The empty mode means the same.
	ModeAuto = "auto"
	// ModeDCGM uses DCGM only; while its hostengine is down nothing serves.
	ModeDCGM = "dcgm"
	// ModeNVML uses NVML only.
	ModeNVML = "nvml"
	// ModeNone opens no backend: GPU metrics are off.
	ModeNone = "none"
)

// Options configure Open. The openers are the caller's, so that this
// package, which the backends' own packages build on, imports neither.
type Options struct {
	// OpenDCGM and OpenNVML open the two backends; nil means that
	// backend is not there.
	OpenDCGM, OpenNVML Opener
	Logger             *zap.Logger
	// Now is the clock of the DCGM reconnect schedule; nil is time.Now.
	Now func() time.Time
}

// Open picks DCGM, then NVML, then none (or the one mode forces) and logs a
// single line naming the choice and why. It does not fail: with no backend
// b is nil and GPU metrics are off while the host collectors keep running.
// why names the backends that could not be opened and their errors; it is
// empty when the first choice opened.
func Open(mode string, opts Options) (b Backend, why string) {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	var reasons []string
	try := func(name string, open Opener) Backend {
		if open == nil {
			reasons = append(reasons, name+": not configured")
			return nil
		}
		b, err := open()
		if err != nil {
			reasons = append(reasons, err.Error())
			return nil
		}
		return b
	}
	// DCGM is wrapped in a failover, so that a hostengine that dies mid-run
	// moves the readings to fallback (NVML in auto mode; nothing when DCGM
	// was forced) and back once it answers again. A DCGM that was not there
	// at start is not retried: that node runs on NVML, as it always did.
	failover := func(dcgm Backend, fallback Opener) Backend {
		return NewFailover(dcgm, FailoverOptions{OpenPrimary: opts.OpenDCGM, OpenFallback: fallback,
			Logger: log, Now: opts.Now})
	}
	switch mode {
	case ModeNone:
		reasons = append(reasons, "disabled by --collector.gpu.backend=none")
	case ModeDCGM:
		if b = try(ModeDCGM, opts.OpenDCGM); b != nil {
			b = failover(b, nil)
		}
	case ModeNVML:
		b = try(ModeNVML, opts.OpenNVML)
	default:
		if b = try(ModeDCGM, opts.OpenDCGM); b != nil {
			b = failover(b, opts.OpenNVML)
		} else {
			b = try(ModeNVML, opts.OpenNVML)
		}
	}
	why = strings.Join(reasons, "; ")
	if b == nil {
		log.Info("no GPU backend: GPU metrics are off, host collectors keep running", zap.String("reason", why))
		return nil, why
	}
	if why != "" {
		log.Info("GPU backend selected", zap.String("backend", b.Name()), zap.String("mode", mode), zap.String("why", "fell back: "+why))
	} else {
		log.Info("GPU backend selected", zap.String("backend", b.Name()), zap.String("mode", mode))
	}
	return b, why
}
