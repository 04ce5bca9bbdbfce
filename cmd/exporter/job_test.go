package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/jobdiag"
)

// `gpudiag job` against a Prometheus that is hostile, slow or huge: its
// bounds are flags with sane defaults, and what it prints, errors included,
// cannot drive the terminal. jobdiag's tests hold the details.

func TestJobFlagsBoundTheAnswers(t *testing.T) {
	o, err := parseFlags([]string{"job", "--prometheus.url=http://prometheus:9090", "--job-id=7"})
	if err != nil {
		t.Fatal(err)
	}
	if o.job.timeout != 30*time.Second || o.job.queryTimeout != 10*time.Second || o.job.maxResponseBytes != jobdiag.DefaultMaxResponseBytes {
		t.Errorf("defaults: --timeout %s, --query-timeout %s, --max-response-bytes %d", o.job.timeout, o.job.queryTimeout, o.job.maxResponseBytes)
	}
	for _, bad := range []string{"--query-timeout=0s", "--max-response-bytes=0", "--timeout=0s"} {
		code, err := run(t.Context(), []string{"job", "--prometheus.url=http://127.0.0.1:1", "--job-id=7", bad}, io.Discard, io.Discard, nil)
		if err == nil || code != exitError || !strings.Contains(err.Error(), strings.SplitN(bad, "=", 2)[0]) {
			t.Errorf("%s: exit %d, %v", bad, code, err)
		}
	}
}

// An error that quotes what a hostile Prometheus wrote (its own error
// text, or job sources it answered) reaches stderr escaped; an answer
// larger than --max-response-bytes is refused by name.
func TestJobErrorsReachTheTerminalEscaped(t *testing.T) {
	const hostile = `\u001b[2J\u001b]0;owned\u0007\r\nfake`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.FormValue("query") {
		case `gpudiag_gpu_job_info{job_id="big"}`:
			_, _ = w.Write(bytes.Repeat([]byte(" "), 4096))
		case `gpudiag_gpu_job_info{job_id="two"}`:
			_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[
				{"metric":{"instance":"a","job_id":"two","job_source":"slurm`+hostile+`"},"value":[1,"1"]},
				{"metric":{"instance":"b","job_id":"two","job_source":"torchrun"},"value":[1,"1"]}]}}`)
		default:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"status":"error","errorType":"bad_data","error":"`+hostile+`"}`)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct{ job, want string }{
		{"7", `refused the query: bad_data: \x1b[2J\x1b]0;owned\x07\r\nfake`},
		{"two", `matches several jobs (slurm\x1b[2J\x1b]0;owned\x07\r\nfake two, torchrun two)`},
	} {
		_, err := run(t.Context(), []string{"job", "--prometheus.url=" + srv.URL, "--job-id=" + tc.job}, io.Discard, io.Discard, nil)
		if err == nil || strings.ContainsAny(err.Error(), "\x1b\x07\r\n") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("job %s: %q, want %q", tc.job, err, tc.want)
		}
	}
	_, err := run(t.Context(), []string{"job", "--prometheus.url=" + srv.URL, "--job-id=big", "--max-response-bytes=1KiB"}, io.Discard, io.Discard, nil)
	var tooLarge *jobdiag.ResponseTooLargeError
	if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "exceeds 1024 bytes (--max-response-bytes)") {
		t.Errorf("4 KiB answer against --max-response-bytes=1KiB: %v", err)
	}
}

// --timeout bounds all the queries together and names itself.
func TestJobTotalTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so the server sees the client hang up
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	_, err := run(context.Background(), []string{"job", "--prometheus.url=" + srv.URL, "--job-id=7", "--timeout=100ms"}, io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "no diagnosis within --timeout 100ms") {
		t.Errorf("a silent Prometheus: %v", err)
	}
}

// `gpudiag job --help` lists the job's own flags and --help, none of the
// daemon's; the daemon's help still lists every flag.
func TestJobHelpShowsOnlyItsFlags(t *testing.T) {
	help := func(args ...string) string {
		app, _ := newApp()
		var b bytes.Buffer
		app.UsageWriter(&b).ErrorWriter(io.Discard).Terminate(func(int) {})
		_, _ = app.Parse(args)
		return b.String()
	}
	job := help("job", "--help")
	for _, want := range []string{"--help", "--prometheus.url", "--job-id", "--job-source", "--pod", "--format", "--timeout", "--query-timeout", "--max-response-bytes", "--window"} {
		if !strings.Contains(job, want) {
			t.Errorf("job --help lacks %s:\n%s", want, job)
		}
	}
	for _, daemon := range []string{"--web.listen-address", "--sample.interval", "--collector.gpu", "--log.level", "--version"} {
		if strings.Contains(job, daemon) {
			t.Errorf("job --help lists the daemon's %s", daemon)
		}
	}
	if n := strings.Count(job, "\n"); n > 40 {
		t.Errorf("job --help is %d lines", n)
	}
	for _, args := range [][]string{{"--help"}, {"diagnose", "--help"}} {
		if h := help(args...); !strings.Contains(h, "--web.listen-address") || !strings.Contains(h, "--collector.gpu") {
			t.Errorf("%v lost the daemon's flags:\n%s", args, h)
		}
	}
}

// Each error of `gpudiag job` names the flag at fault: --prometheus.url
// for a Prometheus that fails, the job's flags for a job it does not know.
func TestJobErrorsNameTheFlagAtFault(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	defer empty.Close()
	for _, tc := range []struct {
		url, sel, want string
	}{
		{down.URL, "--job-id=7", "--prometheus.url " + down.URL + ": "},
		{empty.URL, "--job-id=7", "--job-id 7: "},
		{empty.URL, "--pod=team/trainer-0", "--pod team/trainer-0: "},
	} {
		code, err := run(t.Context(), []string{"job", "--prometheus.url=" + tc.url, tc.sel}, io.Discard, io.Discard, nil)
		if code != exitError || err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s %s: exit %d, %v; want an error starting %q", tc.url, tc.sel, code, err, tc.want)
		}
		if err != nil && strings.Contains(tc.sel, "--pod") && strings.Contains(err.Error(), "job ID") {
			t.Errorf("the --pod error says to check the job ID: %v", err)
		}
	}
}
