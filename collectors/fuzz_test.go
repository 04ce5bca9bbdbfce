package collectors

// Native fuzz targets for the parsers of /proc/<pid> files (this file) and
// of host-wide /proc and /sys files (fuzz_host_test.go). In plain `go test`
// they run their seeds: the f.Add calls, taken from the fixture tree, and
// testdata/fuzz/<name>/. scripts/fuzz.sh explores further. Each asserts
// properties of what the parser returns, not only that it returns.

import (
	"bytes"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpudiag/gpudiag/nccl"
)

// fuzzHangLimit bounds one parse. Go's fuzzing engine has no per-input time
// limit: a worker stuck on an input stalls until -fuzztime runs out, and the
// run passes. A parse takes microseconds; the limit turns a loop that never
// ends, or an input that costs seconds, into a reported failure.
const fuzzHangLimit = 10 * time.Second

// withinHangLimit runs parse, failing the input if it has not returned
// within fuzzHangLimit. parse must not call t's Fatal methods.
func withinHangLimit(t *testing.T, parse func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		parse()
	}()
	select {
	case <-done:
	case <-time.After(fuzzHangLimit):
		t.Fatalf("input still being parsed after %s", fuzzHangLimit)
	}
}

// fuzzSeed returns a file of the fixture host tree as a seed.
func fuzzSeed(f *testing.F, rel string) []byte {
	f.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/host", rel))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// checkError asserts that a parse error names the file and stays short
// whatever the input (see quoteInput).
func checkError(t *testing.T, err error, name string) {
	t.Helper()
	const maxErrorBytes = 1024
	if !strings.HasPrefix(err.Error(), name) || len(err.Error()) > len(name)+maxErrorBytes {
		t.Fatalf("error %.600q: want one naming %s, at most %d bytes after the name", err, name, maxErrorBytes)
	}
}

// formatList renders sorted members in the kernel's list format, runs
// collapsed into ranges: the inverse of parseCPUList.
func formatList(ids []int) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ids[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ids[j]))
		}
		i = j + 1
	}
	return b.String()
}

// checkList asserts what every parsed kernel list is: sorted, distinct
// members within the bound, which render back to the same list.
func checkList(t *testing.T, what string, ids []int) {
	t.Helper()
	for i, id := range ids {
		if id < 0 || id >= maxListID || i > 0 && id <= ids[i-1] {
			t.Fatalf("%s: members %v not sorted, distinct and in [0, %d)", what, ids, maxListID)
		}
	}
	again, err := parseCPUList(formatList(ids))
	if err != nil || !slices.Equal(again, ids) {
		t.Fatalf("%s: %v renders as %q, which parses as %v, %v", what, ids, formatList(ids), again, err)
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-31,64-95", "5", "", " 0 ", "0-1,1-2", "3,1,2", "1-0", "0-65535", "x", "0-", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var ids []int
		var err error
		withinHangLimit(t, func() { ids, err = parseCPUList(s) })
		if err != nil || strings.TrimSpace(s) == "" {
			return
		}
		checkList(t, strconv.Quote(s), ids)
		if len(ids) > maxListID {
			t.Fatalf("%d members", len(ids))
		}
		// Both ends of every entry are members: nothing is dropped. And
		// the entries name no more than the bound, repeats included: the
		// work a list costs is bounded.
		named := 0
		for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			if !isRange {
				hi = lo
			}
			a, errLo := strconv.Atoi(lo)
			b, errHi := strconv.Atoi(hi)
			if errLo != nil || errHi != nil || !slices.Contains(ids, a) || !slices.Contains(ids, b) {
				t.Fatalf("%q: an end of entry %q is missing from %v", s, part, ids)
			}
			named += b - a + 1
		}
		if named > maxListID {
			t.Fatalf("%q names %d members; want an error past %d", s, named, maxListID)
		}
	})
}

func FuzzParseAllowedLists(f *testing.F) {
	f.Add(fuzzSeed(f, "proc/4242/status"))
	f.Add(fuzzSeed(f, "proc/4343/status"))
	f.Add([]byte("Cpus_allowed_list:\t0-3\nMems_allowed_list:\t\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var cpus, mems string
		var allowed []int
		var err error
		withinHangLimit(t, func() { cpus, mems, allowed, err = parseAllowedLists(bytes.NewReader(data), "status") })
		if err != nil {
			checkError(t, err, "status: ")
			return
		}
		if !bytes.Contains(data, []byte(cpus)) || !bytes.Contains(data, []byte(mems)) {
			t.Fatalf("lists %q, %q are not in the file", cpus, mems)
		}
		checkList(t, "Cpus_allowed_list", allowed)
		if want, err := parseCPUList(cpus); err != nil || !slices.Equal(allowed, want) {
			t.Fatalf("allowed %v for list %q", allowed, cpus)
		}
	})
}

func FuzzParseChildren(f *testing.F) {
	f.Add(fuzzSeed(f, "proc/4343/task/4343/children"))
	f.Add([]byte("4344 4345 \n"))
	f.Add([]byte("0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var pids []int
		var err error
		withinHangLimit(t, func() { pids, err = parseChildren("children", data) })
		if err != nil {
			checkError(t, err, "children: ")
			return
		}
		if len(pids) > (len(data)+1)/2 {
			t.Fatalf("%d PIDs from %d bytes", len(pids), len(data))
		}
		var rendered []string
		for _, p := range pids {
			if p <= 0 {
				t.Fatalf("PID %d", p)
			}
			rendered = append(rendered, strconv.Itoa(p))
		}
		if again, err := parseChildren("children", []byte(strings.Join(rendered, " ")+" ")); err != nil || !slices.Equal(again, pids) {
			t.Fatalf("%v renders and reads back as %v, %v", pids, again, err)
		}
	})
}

// numaMapsReference sums N<node>=<pages> × kernelpagesize_kB KiB per node
// with unbounded integers: what parseNUMAMaps must return, or refuse.
func numaMapsReference(data []byte) map[int]*big.Int {
	out := map[int]*big.Int{}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		pageBytes := new(big.Int)
		type count struct {
			node  int
			pages *big.Int
		}
		var counts []count
		for _, f := range strings.Fields(string(line)) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			if k == "kernelpagesize_kB" {
				pageBytes.SetString(v, 10)
				pageBytes.Mul(pageBytes, big.NewInt(1024))
			} else if node, err := strconv.Atoi(strings.TrimPrefix(k, "N")); err == nil && strings.HasPrefix(k, "N") && node >= 0 {
				n, _ := new(big.Int).SetString(v, 10)
				counts = append(counts, count{node, n})
			}
		}
		for _, c := range counts {
			if out[c.node] == nil {
				out[c.node] = new(big.Int)
			}
			out[c.node].Add(out[c.node], new(big.Int).Mul(c.pages, pageBytes))
		}
	}
	return out
}

func FuzzParseNUMAMaps(f *testing.F) {
	f.Add(fuzzSeed(f, "proc/4242/numa_maps"))
	f.Add(fuzzSeed(f, "proc/4343/numa_maps"))
	f.Add([]byte("7f2a00000000 default anon=1 N0=1 N1=2 kernelpagesize_kB=2048\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got map[int]uint64
		var err error
		withinHangLimit(t, func() { got, err = parseNUMAMaps(bytes.NewReader(data), "numa_maps") })
		if err != nil {
			checkError(t, err, "numa_maps")
			return
		}
		if len(got) > bytes.Count(data, []byte("=")) {
			t.Fatalf("%d nodes from %d key=value tokens", len(got), bytes.Count(data, []byte("=")))
		}
		want := numaMapsReference(data)
		for node, b := range got {
			if w := want[node]; node >= maxListID || w == nil && b != 0 || w != nil && (!w.IsUint64() || w.Uint64() != b) {
				t.Fatalf("node %d: %d bytes; the exact sum is %v", node, b, w)
			}
		}
		for node, w := range want {
			if _, ok := got[node]; !ok && w.Sign() != 0 {
				t.Fatalf("node %d (%v bytes) missing", node, w)
			}
		}
	})
}

// environReference is what scanEnviron must keep of data: NUL-separated
// entries within limit (the one the limit cuts dropped), those that do not
// fit in a buffer of bufSize dropped, allow-listed names only.
func environReference(data []byte, bufSize, limit int) (kept []string, truncated bool) {
	if len(data) > limit {
		data, truncated = data[:limit], true
	}
	entries := bytes.Split(data, []byte{0})
	last := entries[len(entries)-1]
	entries = entries[:len(entries)-1]
	if !truncated && len(last) > 0 {
		entries = append(entries, last)
	}
	for _, e := range entries {
		name, _, ok := bytes.Cut(e, []byte("="))
		if len(e) < bufSize && ok && len(name) > 0 && ncclEnvKept(name) {
			kept = append(kept, string(e))
		}
	}
	return kept, truncated
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// plantSecret inserts a variable that is not allow-listed, with a value
// found nowhere in data, as an entry of its own at offset at.
func plantSecret(data []byte, at int) (planted, secret []byte) {
	secret = []byte("s3cr3t")
	for bytes.Contains(data, secret) {
		secret = append(secret, 'x')
	}
	at = min(at, len(data))
	return slices.Concat(data[:at], []byte("\x00GPUDIAG_PLANTED="), secret, []byte("\x00"), data[at:]), secret
}

// FuzzScanEnviron checks the environment reader against a reference model,
// and its security properties: only allow-listed names reach keep, a
// planted secret never does, the buffer is wiped, and no more than limit+1
// bytes are read.
func FuzzScanEnviron(f *testing.F) {
	f.Add(fuzzSeed(f, "proc/5151/environ"), uint8(255), uint16(65535), uint16(0))
	f.Add(fuzzSeed(f, "proc/5252/environ"), uint8(16), uint16(200), uint16(3))
	f.Add([]byte("NCCL_ALGO=Ring\x00NCCL_ALGO=Tree\x00AWS_SECRET_ACCESS_KEY=x\x00NCCL_DEBUG=INFO"), uint8(8), uint16(40), uint16(15))
	f.Fuzz(func(t *testing.T, data []byte, bufSize uint8, limit uint16, plantAt uint16) {
		planted, secret := plantSecret(data, int(plantAt))
		buf := make([]byte, max(int(bufSize), 1))
		r := &countingReader{r: bytes.NewReader(planted)}
		var kept, notAllowed []string
		var truncated bool
		var err error
		withinHangLimit(t, func() {
			truncated, err = scanEnviron(r, buf, int(limit), ncclEnvKept, func(name, value []byte) {
				if !ncclEnvKept(name) {
					notAllowed = append(notAllowed, string(name))
				}
				kept = append(kept, string(name)+"="+string(value))
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(notAllowed) > 0 {
			t.Fatalf("kept %q, not allow-listed", notAllowed)
		}
		for _, k := range kept {
			if strings.Contains(k, string(secret)) {
				t.Fatalf("planted secret kept in %q", k)
			}
		}
		if !bytes.Equal(buf, make([]byte, len(buf))) {
			t.Fatalf("buffer not wiped: %q", buf)
		}
		if r.n > int(limit)+1 {
			t.Fatalf("read %d bytes under a limit of %d", r.n, limit)
		}
		want, wantTruncated := environReference(planted, len(buf), int(limit))
		if !slices.Equal(kept, want) || truncated != wantTruncated {
			t.Fatalf("kept %q truncated %v; want %q %v", kept, truncated, want, wantTruncated)
		}
	})
}

// firstEnvValues maps each allow-listed name of an environ file to its
// first value, as getenv sees it, in order of first appearance.
func firstEnvValues(data []byte) (names []string, values map[string][]byte) {
	values = map[string][]byte{}
	for e := range bytes.SplitSeq(data, []byte{0}) {
		name, value, ok := bytes.Cut(e, []byte("="))
		if _, seen := values[string(name)]; ok && !seen && len(name) > 0 && ncclEnvKept(name) {
			names = append(names, string(name))
			values[string(name)] = value
		}
	}
	return names, values
}

// FuzzKeptEnviron checks what the collector keeps of an environment: the
// first value of at most ncclProcEnvMaxVars allow-listed variables, values
// cut to ncclProcEnvValueBytes of valid UTF-8, truncation reported, and a
// planted secret nowhere.
func FuzzKeptEnviron(f *testing.F) {
	f.Add(fuzzSeed(f, "proc/5151/environ"), uint16(0))
	f.Add(fuzzSeed(f, "proc/5253/environ"), uint16(100))
	f.Add([]byte("NCCL_TOPO_FILE="+strings.Repeat("é", 600)+"\x00NCCL_ALGO=\xff\xfe\x00NCCL_ALGO=Tree"), uint16(7))
	f.Fuzz(func(t *testing.T, data []byte, plantAt uint16) {
		planted, secret := plantSecret(data, int(plantAt))
		c := &ncclProcCollector{}
		var env environRead
		var err error
		withinHangLimit(t, func() { env, err = c.keptEnviron(bytes.NewReader(planted)) })
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

func FuzzParseNCCLMaps(f *testing.F) {
	for _, pid := range []string{"5151", "5252", "5253"} {
		f.Add(fuzzSeed(f, "proc/"+pid+"/maps"))
	}
	f.Add([]byte("7f55d0000000-7f55d4600000 r--p 00000000 103:02 2888001   /opt/my libs/libnccl.so.2.18.3 (deleted)\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var libs []ncclMappedFile
		var err error
		withinHangLimit(t, func() { libs, err = parseNCCLMaps(bytes.NewReader(data), "maps") })
		if err != nil {
			checkError(t, err, "maps:")
			return
		}
		if n := bytes.Count(data, []byte("libnccl")); len(libs) > n {
			t.Fatalf("%d libraries from %d mentions", len(libs), n)
		}
		seen := map[string]bool{}
		for _, l := range libs {
			suffix := ""
			if l.deleted {
				suffix = " (deleted)"
			}
			if !strings.HasPrefix(l.path, "/") || !strings.HasPrefix(filepath.Base(l.path), "libnccl.so") ||
				strings.ContainsRune(l.path, '\n') || !bytes.Contains(data, []byte(l.path+suffix)) || seen[l.path] {
				t.Fatalf("library %+v", l)
			}
			seen[l.path] = true
		}
	})
}
