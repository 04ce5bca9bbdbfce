package sample

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// Samples survive JSON (the record format): unmeasured values stay
// unmeasured instead of failing the encoding or turning into zeros.
func TestGPUSampleJSONRoundTrip(t *testing.T) {
	v := NewValues()
	v.Set(SMActive, 0.5)
	in := GPUs{Backend: "nvml", Devices: []GPU{{Index: 1, Up: true, Values: v,
		Links:     []NVLink{{Link: 0, Up: true, TxBytesPerSecond: math.NaN(), RxBytesPerSecond: 2e9, RxBytesTotal: 4e9}},
		XIDErrors: map[uint64]uint64{79: 2}}}}
	b, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out GPUs
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	d := out.Devices[0]
	if x, ok := d.Values.Get(SMActive); !ok || x != 0.5 {
		t.Fatalf("SM %v %v", x, ok)
	}
	if _, ok := d.Values.Get(TensorActive); ok {
		t.Fatal("an unmeasured field came back measured")
	}
	l := d.Links[0]
	if !math.IsNaN(l.TxBytesPerSecond) || l.RxBytesPerSecond != 2e9 || l.RxBytesTotal != 4e9 || d.XIDErrors[79] != 2 {
		t.Fatalf("link %+v xids %v", l, d.XIDErrors)
	}
}

// The health counters added for dcgm-exporter parity survive JSON: a link's
// error counters (only those read), the ECC counts by location, the MIG
// instances' activity with an unmeasured ratio kept unmeasured, and the new
// scalar fields by name.
func TestGPUHealthCountersJSONRoundTrip(t *testing.T) {
	v := NewValues()
	v.Set(MemoryTemperatureCelsius, 41)
	v.Set(MemoryReservedBytes, 512<<20)
	v.Set(ClockEventSWPowerCapSecondsTotal, 1.5)
	var errs NVLinkErrors
	errs.Set(NVLinkCRCFlit, 3)
	errs.Set(NVLinkRecovery, 0)
	in := GPUs{Devices: []GPU{{Index: 0, Up: true, Values: v,
		Links:        []NVLink{{Link: 4, Up: true, TxBytesPerSecond: 1, RxBytesPerSecond: 1, Errors: errs}, {Link: 5, TxBytesPerSecond: 1, RxBytesPerSecond: 1}},
		ECCErrors:    []ECCCount{{Location: "dram", Counter: ECCAggregate, Type: ECCCorrected, Count: 7}},
		MIGInstances: []MIGInstance{{GPUInstance: 3, Devices: []string{"MIG-a"}, IntervalSeconds: 1, SMActive: 0.25, SMOccupancy: math.NaN(), TensorActive: 0, DRAMActive: 0.5, SMActiveSecondsTotal: 9}},
	}}}
	b, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out GPUs
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	d := out.Devices[0]
	if x, ok := d.Values.Get(MemoryTemperatureCelsius); !ok || x != 41 {
		t.Errorf("memory temperature %v %v", x, ok)
	}
	if x, ok := d.Values.Get(ClockEventSWPowerCapSecondsTotal); !ok || x != 1.5 {
		t.Errorf("power cap seconds %v %v", x, ok)
	}
	l := d.Links[0].Errors
	if x, ok := l.Get(NVLinkCRCFlit); !ok || x != 3 {
		t.Errorf("crc_flit %v %v", x, ok)
	}
	if x, ok := l.Get(NVLinkRecovery); !ok || x != 0 {
		t.Errorf("a recovery count of 0 read came back %v %v", x, ok)
	}
	if _, ok := l.Get(NVLinkReplay); ok {
		t.Error("an unread replay counter came back read")
	}
	if !d.Links[1].Errors.IsZero() || strings.Contains(string(b), `"errors":{}`) {
		t.Errorf("a link without counters: %+v in %s", d.Links[1].Errors, b)
	}
	if len(d.ECCErrors) != 1 || d.ECCErrors[0] != in.Devices[0].ECCErrors[0] {
		t.Errorf("ECC counts %+v", d.ECCErrors)
	}
	m := d.MIGInstances[0]
	if m.GPUInstance != 3 || m.SMActive != 0.25 || !math.IsNaN(m.SMOccupancy) || m.TensorActive != 0 || m.SMActiveSecondsTotal != 9 || m.Devices[0] != "MIG-a" {
		t.Errorf("MIG instance %+v", m)
	}
}
