package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunScenario(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run([]string{"-scenario", "../../testdata/fabric/port_trained_down.json", "-out", dir}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"port_trained_down-node0.gdrec", "port_trained_down-node1.gdrec"} {
		p := filepath.Join(dir, n)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", n, st.Mode().Perm())
		}
		if !strings.Contains(out.String(), p) {
			t.Errorf("output %q does not name %s", out.String(), p)
		}
		want, err := os.ReadFile(filepath.Join("../../testdata/fabric/traces", n))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
			t.Errorf("%s differs from the committed trace", n)
		}
	}
	// -summary on a written trace.
	out.Reset()
	if err := run([]string{"-summary", filepath.Join(dir, "port_trained_down-node0.gdrec")}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "mlx5_1 (InfiniBand, 200 Gb/s degraded)") {
		t.Errorf("summary:\n%s", out.String())
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"name":"bad","nodes":2,"base":"x.gdrec","hcas":[{"device":"mlx5_0"}],"nccl":{"hca_of_gpu":[0]}}`), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-out", dir}, "exactly one of -scenario"},
		{[]string{"-scenario", bad}, "-out DIR is required"},
		{[]string{"-scenario", bad, "-all", dir, "-out", dir}, "exactly one of -scenario"},
		{[]string{"-scenario", bad, "-out", dir}, "rate_gbps missing"},
		{[]string{"-all", t.TempDir(), "-out", dir}, "no *.json scenario"},
	} {
		err := run(tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
