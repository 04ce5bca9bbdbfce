package main

import (
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// `gpudiag diagnose` over a 33 s trace with a longer --for: the header says
// the span the samples cover, each verdict how long it held (from the
// samples, not "0 s" at the end of the span), and a timeline follows.
func TestDiagnoseOnceSaysTheRealSpanAndHowLongVerdictsHeld(t *testing.T) {
	var out syncBuffer
	code, err := run(context.Background(), []string{"diagnose", "--replay=" + filepath.Join(tracesDir, "bf16_gemm.gdrec"), "--for=10m"}, &out, io.Discard, nil)
	if err != nil || code != exitOK {
		t.Fatalf("exit %d, %v\n%s", code, err, out.String())
	}
	text := out.String()
	m := regexp.MustCompile(`over (\d+)s\n`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no span in the header:\n%s", text)
	}
	if s, _ := strconv.Atoi(m[1]); s < 20 || s > 40 {
		t.Errorf("span %ds; the trace holds 33 s:\n%s", s, text)
	}
	held := regexp.MustCompile(`GPU 0: compute/tensor \(confidence [0-9.]+\) for (\d+) s, since`).FindStringSubmatch(text)
	if held == nil {
		t.Fatalf("no GPU 0 verdict with its age:\n%s", text)
	}
	if s, _ := strconv.Atoi(held[1]); s < 15 {
		t.Errorf("GPU 0 held compute for %d s; the trace's last 23 s are compute:\n%s", s, text)
	}
	if strings.Contains(text, "for 0 s") || !regexp.MustCompile(`\n  GPU 0 +[?.]*C{15,}\n`).MatchString(text) || !strings.Contains(text, "TIMELINE") {
		t.Errorf("no timeline of GPU 0, or a verdict of no age:\n%s", text)
	}
}

// Without a GPU the text says so in exit 5's words, not exit 4's.
func TestDiagnoseOnceWithoutGPUSaysNoGPU(t *testing.T) {
	var out syncBuffer
	code, err := run(context.Background(), []string{"diagnose", "--for=1s", "--sample.interval=200ms", "--collector.gpu.backend=none"}, &out, io.Discard, nil)
	if err != nil || code != exitNoGPU {
		t.Fatalf("exit %d, %v\n%s", code, err, out.String())
	}
	if text := out.String(); !strings.Contains(text, "no GPU seen") || strings.Contains(text, "could be classified") {
		t.Errorf("exit 5 worded as:\n%s", text)
	}
}
