package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/alecthomas/units"

	"github.com/gpudiag/gpudiag/jobdiag"
	"github.com/gpudiag/gpudiag/safetext"
)

// jobOptions are the job command's flags.
type jobOptions struct {
	prometheusURL    string
	sel              jobdiag.Selector
	format           string
	timeout          time.Duration
	queryTimeout     time.Duration
	maxResponseBytes units.Base2Bytes
	window           time.Duration
}

// runJob prints one training job's diagnosis from Prometheus. Its exit code
// follows diagnose's: 3 when the job is communication-, I/O- or host-bound,
// 2 with warning or critical findings on its nodes, else 0.
func runJob(ctx context.Context, o jobOptions, out io.Writer) (int, error) {
	code, err := diagnoseJob(ctx, o, out)
	if err != nil {
		// Errors quote what Prometheus answered (a job ID, its own error
		// text): printed raw they could drive the terminal.
		err = terminalError{err}
	}
	return code, err
}

func diagnoseJob(ctx context.Context, o jobOptions, out io.Writer) (int, error) {
	switch {
	case o.timeout <= 0:
		return exitError, fmt.Errorf("--timeout %s: must be positive", o.timeout)
	case o.queryTimeout <= 0:
		return exitError, fmt.Errorf("--query-timeout %s: must be positive", o.queryTimeout)
	case o.maxResponseBytes <= 0:
		return exitError, fmt.Errorf("--max-response-bytes %s: must be positive", o.maxResponseBytes)
	}
	api, err := jobdiag.NewAPI(o.prometheusURL, jobdiag.ClientOptions{MaxResponseBytes: int64(o.maxResponseBytes), QueryTimeout: o.queryTimeout})
	if err != nil {
		return exitError, fmt.Errorf("--prometheus.url %q: %w", o.prometheusURL, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("no diagnosis within --timeout %s", o.timeout))
	defer cancel()
	r, err := jobdiag.Query(ctx, api, o.sel, time.Now(), o.window)
	if errors.Is(err, jobdiag.ErrPrometheus) {
		return exitError, fmt.Errorf("--prometheus.url %s: %w", o.prometheusURL, err)
	}
	if err != nil {
		// The job's flags are at fault (--job-id, --pod, --job-source): the
		// error names them.
		return exitError, err
	}
	if o.format == "json" {
		err = r.WriteJSON(out)
	} else {
		err = r.WriteText(out)
	}
	if err != nil {
		return exitError, err
	}
	switch r.Class {
	case "communication", "io", "host":
		return exitBottleneck, nil
	}
	for _, f := range r.Findings {
		if f.Severity == "critical" || f.Severity == "warning" {
			return exitFindings, nil
		}
	}
	return exitOK, nil
}

// terminalError is an error whose text is safe to print on a terminal;
// errors.Is and As still see the error it wraps.
type terminalError struct{ err error }

func (e terminalError) Error() string { return safetext.Terminal(e.err.Error()) }

func (e terminalError) Unwrap() error { return e.err }
