package hostfs

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseNCCLMaps(t *testing.T) {
	line := func(perms, path string) string {
		return fmt.Sprintf("%-73s%s", "7f1e9c000000-7f1e9c5e0000 "+perms+" 00000000 00:2f 1722113 ", path)
	}
	for _, tc := range []struct {
		name    string
		input   string
		want    []MappedFile
		wantErr string
	}{
		{"versioned, mapped in several segments", line("r--p", "/usr/lib/libnccl.so.2.28.9") + "\n" + line("r-xp", "/usr/lib/libnccl.so.2.28.9") + "\n",
			[]MappedFile{{Path: "/usr/lib/libnccl.so.2.28.9"}}, ""},
		{"two libraries, one deleted", line("r-xp", "/opt/a/libnccl.so.2") + "\n" + line("r-xp", "/opt/b/libnccl.so.2.19.3 (deleted)") + "\n",
			[]MappedFile{{Path: "/opt/a/libnccl.so.2"}, {Path: "/opt/b/libnccl.so.2.19.3", Deleted: true}}, ""},
		{"path with spaces", line("r-xp", "/data/my env/lib/libnccl.so") + "\n", []MappedFile{{Path: "/data/my env/lib/libnccl.so"}}, ""},
		{"net plugin and static archive are not libnccl", line("r-xp", "/opt/hpcx/lib/libnccl-net.so") + "\n" + line("r--p", "/x/libnccl_static.a") + "\n", nil, ""},
		{"anonymous and other libraries", "7f1e80000000-7f1e80021000 rw-p 00000000 00:00 0 \n" + line("r-xp", "/usr/lib/libc.so.6") + "\n", nil, ""},
		{"memfd named like it", line("rw-s", "/memfd:libnccl.so.2 (deleted)") + "\n", nil, ""},
		{"truncated line", "7f1e9c000000-7f1e9c5e0000 r-xp libnccl\n", nil, "maps:1: malformed"},
		{"no address", "x r-xp 00000000 00:2f 1 /usr/lib/libnccl.so.2\n", nil, "maps:1: malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNCCLMaps(strings.NewReader(tc.input), "maps")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func FuzzParseNCCLMaps(f *testing.F) {
	for _, pid := range []string{"5151", "5252", "5253"} {
		f.Add(hosttest.Seed(f, "proc/"+pid+"/maps"))
	}
	f.Add([]byte("7f55d0000000-7f55d4600000 r--p 00000000 103:02 2888001   /opt/my libs/libnccl.so.2.18.3 (deleted)\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var libs []MappedFile
		var err error
		hosttest.WithinHangLimit(t, func() { libs, err = ParseNCCLMaps(bytes.NewReader(data), "maps") })
		if err != nil {
			hosttest.CheckError(t, err, "maps:")
			return
		}
		if n := bytes.Count(data, []byte("libnccl")); len(libs) > n {
			t.Fatalf("%d libraries from %d mentions", len(libs), n)
		}
		seen := map[string]bool{}
		for _, l := range libs {
			suffix := ""
			if l.Deleted {
				suffix = " (deleted)"
			}
			if !strings.HasPrefix(l.Path, "/") || !strings.HasPrefix(filepath.Base(l.Path), "libnccl.so") ||
				strings.ContainsRune(l.Path, '\n') || !bytes.Contains(data, []byte(l.Path+suffix)) || seen[l.Path] {
				t.Fatalf("library %+v", l)
			}
			seen[l.Path] = true
		}
	})
}
