package sample

import (
	"encoding/json"
	"math"
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
