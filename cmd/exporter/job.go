package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/gpudiag/gpudiag/jobdiag"
)

// jobOptions are the job command's flags.
type jobOptions struct {
	prometheusURL string
	sel           jobdiag.Selector
	format        string
	timeout       time.Duration
	window        time.Duration
}

// runJob prints one training job's diagnosis from Prometheus. Its exit code
// follows diagnose's: 3 when the job is communication-, I/O- or host-bound,
// 2 with warning or critical findings on its nodes, else 0.
func runJob(ctx context.Context, o jobOptions, out io.Writer) (int, error) {
	if o.timeout <= 0 {
		return exitError, fmt.Errorf("--timeout %s: must be positive", o.timeout)
	}
	client, err := api.NewClient(api.Config{Address: o.prometheusURL, Client: &http.Client{Timeout: o.timeout}})
	if err != nil {
		return exitError, fmt.Errorf("--prometheus.url %q: %w", o.prometheusURL, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r, err := jobdiag.Query(ctx, v1.NewAPI(client), o.sel, time.Now(), o.window)
	if err != nil {
		return exitError, fmt.Errorf("%s: %w", o.prometheusURL, err)
	}
	if o.format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return exitError, err
		}
	} else if err := r.WriteText(out); err != nil {
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
