package sample

import (
	"math"
	"strings"
	"testing"
)

// A recorded reading is held to what the collector can read: the replay
// refuses a frame whose width or speed could carry anything into a label
// or a finding's text.
func TestInfiniBandValidate(t *testing.T) {
	good := func() *InfiniBand {
		return &InfiniBand{IntervalSeconds: 10, Ports: []InfiniBandPort{{Device: "mlx5_0", Port: 1, LinkLayer: "InfiniBand", StateID: 4,
			RateBytesPerSecond: 50e9, LinkWidth: 4, LinkSpeed: "NDR", Rates: map[InfiniBandCounter]float64{IBTransmitBytes: 1e9}}}}
	}
	for _, tc := range []struct {
		name  string
		spoil func(*InfiniBand)
		want  string // in the error; empty for none
	}{
		{"as the collector reads it", func(*InfiniBand) {}, ""},
		{"width unknown", func(s *InfiniBand) { s.Ports[0].LinkWidth, s.Ports[0].LinkSpeed = 0, "" }, ""},
		{"not measured rate", func(s *InfiniBand) { s.Ports[0].RateBytesPerSecond = math.NaN() }, ""},
		{"three lanes", func(s *InfiniBand) { s.Ports[0].LinkWidth = 3 }, "ports[0].link_width: 3"},
		{"negative width", func(s *InfiniBand) { s.Ports[0].LinkWidth = -4 }, "ports[0].link_width"},
		{"escape in the speed", func(s *InfiniBand) { s.Ports[0].LinkSpeed = "\x1b[2J" }, "ports[0].link_speed"},
		{"long speed", func(s *InfiniBand) { s.Ports[0].LinkSpeed = strings.Repeat("N", 4096) }, "ports[0].link_speed"},
		{"lower-case speed", func(s *InfiniBand) { s.Ports[0].LinkSpeed = "ndr" }, "ports[0].link_speed"},
		{"negative rate", func(s *InfiniBand) { s.Ports[0].RateBytesPerSecond = -1 }, "ports[0].rate_bps"},
		{"infinite rate", func(s *InfiniBand) { s.Ports[0].RateBytesPerSecond = math.Inf(1) }, "ports[0].rate_bps"},
		{"negative counter rate", func(s *InfiniBand) { s.Ports[0].Rates[IBTransmitBytes] = -1e308 }, "ports[0].rates.transmit_bytes"},
		{"negative interval", func(s *InfiniBand) { s.IntervalSeconds = -1 }, "interval_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.spoil(s)
			err := s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one naming %s", err, tc.want)
			}
		})
	}
}

// The width rule: 1X always and 2X below HDR are too few lanes on an
// InfiniBand port; 2X HDR and NDR are splitter cables'; RoCE, a port not
// active, and an unknown width or speed are never judged.
func TestInfiniBandWidthDegraded(t *testing.T) {
	port := func(layer string, state uint, width int, speed string) InfiniBandPort {
		return InfiniBandPort{LinkLayer: layer, StateID: state, LinkWidth: width, LinkSpeed: speed}
	}
	for _, tc := range []struct {
		p    InfiniBandPort
		want bool
	}{
		{port("InfiniBand", 4, 1, "EDR"), true},
		{port("InfiniBand", 4, 1, "NDR"), true},
		{port("InfiniBand", 4, 2, "EDR"), true},
		{port("InfiniBand", 4, 2, "FDR10"), true},
		{port("InfiniBand", 4, 2, "HDR"), false},
		{port("InfiniBand", 4, 2, "NDR"), false},
		{port("InfiniBand", 4, 2, "XDR"), false},
		{port("InfiniBand", 4, 4, "SDR"), false},
		{port("InfiniBand", 4, 12, "QDR"), false},
		{port("Ethernet", 4, 1, "EDR"), false},
		{port("InfiniBand", 1, 1, "EDR"), false},
		{port("InfiniBand", 4, 0, ""), false},
		{port("InfiniBand", 4, 1, "GDR"), false}, // a speed not known yet
	} {
		if got := tc.p.WidthDegraded(); got != tc.want {
			t.Errorf("%s state %d %dX %s: %v; want %v", tc.p.LinkLayer, tc.p.StateID, tc.p.LinkWidth, tc.p.LinkSpeed, got, tc.want)
		}
	}
}
