package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"

	"github.com/gpudiag/gpudiag/hostfile"
	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/safetext"
)

// ncclOptions are the nccl command's flags.
type ncclOptions struct {
	files    []string
	format   string
	maxBytes units.Base2Bytes
	timeout  time.Duration
}

// addNCCLCommand declares `gpudiag nccl FILE...`: the offline diagnosis of
// saved NCCL_DEBUG=INFO logs, for the engineer holding a failed job's
// output.
func addNCCLCommand(app *kingpin.Application, o *ncclOptions) {
	cmd := app.Command("nccl", "Diagnose saved NCCL_DEBUG=INFO logs (a job's output, an NCCL_DEBUG_FILE) and exit: 0 healthy, 2 findings, 3 a slower path taken (an NCCL fallback), 5 no NCCL line, 1 error.")
	cmd.Flag("format", "Output format: text or json.").Default("text").EnumVar(&o.format, "text", "json")
	cmd.Flag("max-bytes", "Most bytes read of each log; the rest is left unread and the report says so.").Default("1GiB").BytesVar(&o.maxBytes)
	cmd.Flag("timeout", "Deadline for reading and diagnosing all the logs.").Default("5m").DurationVar(&o.timeout)
	cmd.Arg("file", "The logs; - reads standard input.").Required().StringsVar(&o.files)
}

// ncclStdin is what "-" reads; tests replace it.
var ncclStdin io.Reader = os.Stdin

// ncclLog is one log's report as `gpudiag nccl` prints it.
type ncclLog struct {
	File      string `json:"file"`
	Error     string `json:"error,omitempty"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
	// DroppedLines counts lines over the line limit.
	DroppedLines int `json:"dropped_lines,omitempty"`
	*nccl.Report
}

// runNCCL diagnoses each log and returns the exit code that summarises
// them all, with diagnose's meanings and order: 1 a log could not be read,
// 3 a log shows a slower path taken (the job's communication is what is
// slow), 5 no log holds an NCCL line (nothing to diagnose, as no GPU is for
// diagnose), 2 warning findings (NCCL's own WARN lines), 0 otherwise.
func runNCCL(ctx context.Context, o ncclOptions, out io.Writer) (int, error) {
	switch {
	case o.timeout <= 0:
		return exitError, fmt.Errorf("--timeout %s: must be positive", o.timeout)
	case o.maxBytes <= 0:
		return exitError, fmt.Errorf("--max-bytes %s: must be positive", o.maxBytes)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("no diagnosis within --timeout %s", o.timeout))
	defer cancel()
	logs := make([]ncclLog, 0, len(o.files))
	for _, path := range o.files {
		lg, err := readNCCLLog(ctx, path, int64(o.maxBytes))
		if err != nil && ctx.Err() != nil {
			return exitError, terminalError{context.Cause(ctx)}
		}
		if err != nil {
			lg.Error = err.Error()
		}
		logs = append(logs, lg)
	}
	var err error
	if o.format == "json" {
		err = writeNCCLJSON(out, logs)
	} else {
		writeNCCLText(out, logs)
	}
	if err != nil {
		return exitError, err
	}
	return ncclExitCode(logs), nil
}

// readNCCLLog reads one log, bounded in bytes by maxBytes and in time by
// ctx: a read that blocks past it (a pipe whose writer never closes) is
// abandoned, and the command ends.
func readNCCLLog(ctx context.Context, path string, maxBytes int64) (ncclLog, error) {
	lg := ncclLog{File: path}
	var r io.Reader
	// kingpin hands a lone "-" argument over as "": both mean standard
	// input (no file is named "").
	if path == "-" || path == "" {
		lg.File = "(standard input)"
		r = ncclStdin
	} else {
		// hostfile.Open refuses what is not a regular file (a FIFO, a
		// device) before reading anything.
		f, err := hostfile.Open(path)
		if err != nil {
			return lg, err
		}
		defer f.Close()
		r = f
	}
	type result struct {
		log *nccl.Log
		st  nccl.ReadStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, st, err := nccl.ReadLog(ctx, r, nccl.ReadLimits{MaxBytes: maxBytes})
		done <- result{l, st, err}
	}()
	select {
	case <-ctx.Done():
		return lg, ctx.Err()
	case res := <-done:
		lg.Bytes, lg.Truncated, lg.DroppedLines = res.st.Bytes, res.st.Truncated, res.st.DroppedLines
		if res.err != nil {
			return lg, res.err
		}
		rep := nccl.Analyze(res.log)
		lg.Report = &rep
		return lg, nil
	}
}

func ncclExitCode(logs []ncclLog) int {
	code := exitOK
	anyNCCL, fallback, warning := false, false, false
	for _, lg := range logs {
		if lg.Error != "" {
			return exitError
		}
		anyNCCL = anyNCCL || lg.NCCLLines > 0
		fallback = fallback || len(lg.Fallbacks) > 0
		for _, f := range lg.Findings {
			warning = warning || f.Severity == nccl.SeverityWarning
		}
	}
	switch {
	case fallback:
		code = exitBottleneck
	case !anyNCCL:
		code = exitNoGPU
	case warning:
		code = exitFindings
	}
	return code
}

// writeNCCLJSON writes {"logs": [...]}, escaped so that no text a log
// carried can drive the terminal it is printed on.
func writeNCCLJSON(w io.Writer, logs []ncclLog) error {
	b, err := json.MarshalIndent(struct {
		Logs []ncclLog `json:"logs"`
	}{logs}, "", "  ")
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, safetext.JSON(string(b))+"\n")
	return err
}

// ncclText bounds one printed value; everything printed passes
// safetext.Line.
const ncclText = 4 * safetext.LabelMaxBytes

func writeNCCLText(w io.Writer, logs []ncclLog) {
	line := func(format string, a ...any) {
		for i, v := range a {
			if s, ok := v.(string); ok {
				a[i] = safetext.Line(s, ncclText)
			}
		}
		fmt.Fprintf(w, format+"\n", a...)
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "-"
		}
		return strings.Join(l, ", ")
	}
	for i, lg := range logs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if lg.Error != "" {
			line("== %s: %s", lg.File, lg.Error)
			continue
		}
		r := lg.Report
		line("== %s: %s lines, %s from NCCL, %s on %s", lg.File, strconv.FormatUint(r.Lines, 10),
			strconv.FormatUint(r.NCCLLines, 10), plural(r.Processes, "process", "processes"), plural(r.Hosts, "host", "hosts"))
		if lg.Truncated {
			line("   read the first %s only (--max-bytes)", hostfile.Size(lg.Bytes))
		}
		if lg.DroppedLines > 0 {
			line("   %s over the line limit skipped", plural(lg.DroppedLines, "line", "lines"))
		}
		if r.NCCLLines == 0 {
			line("   no NCCL_DEBUG line: was the job run with NCCL_DEBUG=INFO?")
			continue
		}
		network := r.Network
		if network == "" {
			network = "not named in the log"
		}
		if len(r.NICs) > 0 {
			network += " (" + strings.Join(r.NICs, ", ") + ")"
		}
		line("NCCL versions:   %s", list(r.Versions))
		line("Network:         %s", network)
		line("Transports:      within nodes %s; between nodes %s", list(r.WithinNode), list(r.BetweenNodes))
		line("GPUDirect RDMA:  %s", strings.ReplaceAll(r.GDR, "_", " "))
		line("Fallbacks:       %s", list(r.Fallbacks))
		if len(r.Communicators) > 0 {
			line("Communicators:")
			for _, c := range r.Communicators {
				nodes := ""
				if c.NNodes > 0 {
					nodes = " (NCCL counts " + plural(c.NNodes, "node", "nodes") + ")"
				}
				line("  %s: %s%s, %s seen on %s; within nodes %s, between nodes %s", c.ID,
					plural(c.NRanks, "rank", "ranks"), nodes, strconv.Itoa(c.RanksSeen), plural(c.Hosts, "host", "hosts"),
					list(c.WithinNode), list(c.BetweenNodes))
			}
		}
		if len(r.Findings) > 0 {
			line("Findings:")
			for _, f := range r.Findings {
				line("  [%s] %s in %s (e.g. %s)", f.Severity, f.Kind, plural(f.Processes, "process", "processes"), f.Example)
				if f.Taken != "" || f.Expected != "" {
					line("      took %s, expected %s", f.Taken, f.Expected)
				}
				line("      evidence: %s", f.Evidence)
				line("      fix: %s", f.Fix)
			}
		}
		if len(r.Env) > 0 {
			var env []string
			for _, e := range r.Env {
				env = append(env, e.Name+"="+e.Value)
			}
			line("Environment:     %s", strings.Join(env, " "))
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
