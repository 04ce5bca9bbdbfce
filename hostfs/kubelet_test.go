package hostfs

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func kubeletSeed(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/kubelet/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseKubeletConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    KubeletConfig
		wantErr string
	}{
		{"reference host", string(kubeletSeed(t, "config.yaml")), KubeletConfig{CPUManagerPolicy: "static",
			TopologyManagerPolicy: "best-effort", ReservedSystemCPUs: "0,64"}, ""},
		{"JSON", `{"topologyManagerPolicy":"single-numa-node","topologyManagerScope":"pod","memoryManagerPolicy":"Static"}`,
			KubeletConfig{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "pod", MemoryManagerPolicy: "Static"}, ""},
		{"empty", "", KubeletConfig{}, ""},
		{"a list", "- a\n- b\n", KubeletConfig{}, "config.yaml: "},
		{"policy not a string", "cpuManagerPolicy: [static]\n", KubeletConfig{}, "config.yaml: "},
	} {
		got, err := ParseKubeletConfig("config.yaml", []byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v; want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestParseManagerState(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    ManagerState
		wantErr bool
	}{
		{"static CPU manager", string(kubeletSeed(t, "cpu_manager_state")), ManagerState{PolicyName: "static",
			DefaultCPUSet: "0-3,12-63,64-67,76-127", Pods: []string{"6f1e2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"}, Containers: 1}, false},
		{"memory manager None", string(kubeletSeed(t, "memory_manager_state")), ManagerState{PolicyName: "None"}, false},
		{"memory manager Static", `{"policyName":"Static","entries":{"b":{"c":[{"numaAffinity":[1],"type":"memory","size":1}]},"a":{"c":[],"d":[]},"e":{}}}`,
			ManagerState{PolicyName: "Static", Pods: []string{"a", "b"}, Containers: 3}, false},
		{"truncated", `{"policyName":"static","entr`, ManagerState{}, true},
		{"entries a list", `{"entries":[]}`, ManagerState{}, true},
	} {
		got, err := ParseManagerState("state", []byte(tc.in))
		if tc.wantErr {
			if err == nil || !strings.HasPrefix(err.Error(), "state: ") {
				t.Errorf("%s: error %v; want one naming the file", tc.name, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// FuzzParseKubeletConfig: any file gives the settings or a short error
// naming the file, never a panic.
func FuzzParseKubeletConfig(f *testing.F) {
	f.Add(kubeletSeed(f, "config.yaml"))
	f.Add([]byte("cpuManagerPolicy: &a [*a]\n"))
	f.Add([]byte(`{"cpuManagerPolicy":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var err error
		hosttest.WithinHangLimit(t, func() { _, err = ParseKubeletConfig("config.yaml", data) })
		if err != nil {
			hosttest.CheckError(t, err, "config.yaml: ")
		}
	})
}

// FuzzParseManagerState: any checkpoint gives a state whose pods are
// distinct and sorted, or a short error naming the file.
func FuzzParseManagerState(f *testing.F) {
	f.Add(kubeletSeed(f, "cpu_manager_state"))
	f.Add(kubeletSeed(f, "memory_manager_state"))
	f.Add([]byte(`{"entries":{"a":null,"b":{"x":1}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s ManagerState
		var err error
		hosttest.WithinHangLimit(t, func() { s, err = ParseManagerState("state", data) })
		if err != nil {
			hosttest.CheckError(t, err, "state: ")
			return
		}
		for i := 1; i < len(s.Pods); i++ {
			if s.Pods[i-1] >= s.Pods[i] {
				t.Fatalf("pods %q not sorted and distinct", s.Pods)
			}
		}
		if s.Containers < len(s.Pods) {
			t.Fatalf("%d containers for %d pods", s.Containers, len(s.Pods))
		}
	})
}
