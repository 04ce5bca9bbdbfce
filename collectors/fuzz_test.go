package collectors

// Native fuzz targets for what the collectors make of host files: the
// environment the NCCL process collector keeps (this file) and the parsers
// of host-wide /proc and /sys files still in collectors
// (fuzz_host_test.go); the parsers of hostfs have theirs beside them. In
// plain `go test` they run their seeds: the f.Add calls, taken from the
// fixture tree, and testdata/fuzz/<name>/. scripts/fuzz.sh explores
// further. Each asserts properties of what the parser returns, not only
// that it returns.

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/sample"
)

// firstEnvValues maps each allow-listed name of an environ file to its
// first value, as getenv sees it, in order of first appearance. A job
// identity whose first value is not in its scheduler's format is not kept
// (nor any later value of it): the workload wrote it, and it would become
// the job_id label.
func firstEnvValues(data []byte) (names []string, values map[string][]byte) {
	values = map[string][]byte{}
	for e := range bytes.SplitSeq(data, []byte{0}) {
		name, value, ok := bytes.Cut(e, []byte("="))
		if _, seen := values[string(name)]; ok && !seen && len(name) > 0 && ncclEnvKept(name) {
			values[string(name)] = value
			n, v := string(name), string(value)
			if nccl.JobIdentityVar(n) && !sample.NoJobIdentity(n, v) && !sample.ValidJobIdentity(n, v) {
				continue
			}
			names = append(names, n)
		}
	}
	return names, values
}

// FuzzKeptEnviron checks what the collector keeps of an environment: the
// first value of at most ncclProcEnvMaxVars allow-listed variables, values
// cut to ncclProcEnvValueBytes of valid UTF-8, truncation reported, and a
// planted secret nowhere.
func FuzzKeptEnviron(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/5151/environ"), uint16(0))
	f.Add(hosttest.Seed(f, "proc/5253/environ"), uint16(100))
	f.Add([]byte("NCCL_TOPO_FILE="+strings.Repeat("é", 600)+"\x00NCCL_ALGO=\xff\xfe\x00NCCL_ALGO=Tree"), uint16(7))
	f.Fuzz(func(t *testing.T, data []byte, plantAt uint16) {
		planted, secret := hosttest.PlantSecret(data, int(plantAt))
		c := &ncclProcCollector{}
		var env environRead
		var err error
		hosttest.WithinHangLimit(t, func() { env, err = c.keptEnviron(hostfs.EnvironOf(bytes.NewReader(planted))) })
		if err != nil {
			t.Fatal(err)
		}
		if len(planted) > ncclProcEnvironChunk {
			return // entries longer than the buffer are skipped: FuzzScanEnviron's model covers that
		}
		names, first := firstEnvValues(planted)
		wantTruncated := len(names) > ncclProcEnvMaxVars
		names = names[:min(len(names), ncclProcEnvMaxVars)]
		if len(env.vars) != len(names) {
			t.Fatalf("kept %d variables; want %d", len(env.vars), len(names))
		}
		for i, v := range env.vars {
			if v.Name != names[i] || !utf8.ValidString(v.Value) || len(v.Value) > ncclProcEnvValueBytes ||
				strings.Contains(v.Name+v.Value, string(secret)) {
				t.Fatalf("variable %d: %q=%q (%d bytes); want %s, at most %d bytes of UTF-8",
					i, v.Name, v.Value, len(v.Value), names[i], ncclProcEnvValueBytes)
			}
			// The value kept is the start of the first one, made valid
			// UTF-8; when it is not all of it, the variable is listed as
			// cut, and only a long value is.
			raw := first[v.Name]
			whole := strings.ToValidUTF8(string(raw), "\uFFFD")
			isCut := slices.Contains(env.cut, v.Name)
			// A name off the allow-list, or a secret-shaped value,
			// keeps only the name.
			if nccl.EnvPolicy([]byte(v.Name)) == nccl.EnvNameOnly || nccl.SecretShaped(string(raw)) {
				if v.Value != nccl.Redacted || isCut {
					t.Fatalf("%s=%q, cut %v; want %q", v.Name, v.Value, isCut, nccl.Redacted)
				}
				continue
			}
			if !strings.HasPrefix(whole, v.Value) || v.Value != whole && !isCut ||
				isCut && len(raw) <= ncclProcEnvValueBytes && len(whole) <= ncclProcEnvValueBytes {
				t.Fatalf("%s=%q, cut %v; its first value is %q", v.Name, v.Value, isCut, whole)
			}
			wantTruncated = wantTruncated || isCut
		}
		if env.truncated != wantTruncated || len(env.cut) > len(env.vars) {
			t.Fatalf("truncated %v, cut %q; want truncated %v", env.truncated, env.cut, wantTruncated)
		}
	})
}
