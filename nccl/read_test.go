package nccl

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestReadLog(t *testing.T) {
	in := "h:1:1 [0] NCCL INFO Using network IB\n" +
		"h:1:1 [0] NCCL INFO " + strings.Repeat("x", 200) + "\n" + // over the line limit
		"h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\x00\x00 ; OOB eth0:10.0.0.1<0>\r\n" +
		"NCCL version 2.28.9+cuda13.0" // no newline at the end
	l, st, err := ReadLog(context.Background(), strings.NewReader(in), ReadLimits{MaxLineBytes: 100})
	if err != nil || st.DroppedLines != 1 || st.Truncated || st.Bytes != int64(len(in)) {
		t.Fatalf("stats %+v err %v", st, err)
	}
	s := l.Summaries()[0]
	if s.Network != "IB" || len(s.IBDevices) != 1 || s.IBDevices[0] != "mlx5_0:1/IB" || l.Versions()[0] != "2.28.9+cuda13.0" {
		t.Fatalf("summary %+v versions %v", s, l.Versions())
	}
	if l.Lines() != 3 {
		t.Fatalf("%d lines fed; want 3 (one dropped)", l.Lines())
	}
}

func TestReadLogBounds(t *testing.T) {
	in := strings.Repeat("h:1:1 [0] NCCL INFO Using network IB\n", 100)
	_, st, err := ReadLog(context.Background(), strings.NewReader(in), ReadLimits{MaxBytes: 370})
	if err != nil || !st.Truncated || st.Bytes != 370 {
		t.Fatalf("stats %+v err %v", st, err)
	}
	_, st, err = ReadLog(context.Background(), strings.NewReader(in), ReadLimits{MaxBytes: int64(len(in))})
	if err != nil || st.Truncated {
		t.Fatalf("a log of exactly the limit: stats %+v err %v", st, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := ReadLog(ctx, strings.NewReader(in), ReadLimits{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: %v", err)
	}
}
