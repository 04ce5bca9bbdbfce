package hostfs

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// blockQueueFiles serves attributes from a map, recording the order asked.
func blockQueueFiles(files map[string]string, asked *[]string) BlockQueueAttr {
	return func(name string) ([]byte, bool, error) {
		*asked = append(*asked, name)
		v, ok := files[name]
		return []byte(v), ok, nil
	}
}

func TestParseBlockQueue(t *testing.T) {
	nvme := map[string]string{"read_ahead_kb": "128\n", "rotational": "0\n", "scheduler": "[none] mq-deadline kyber\n", "nr_requests": "1023\n"}
	with := func(name, value string) map[string]string {
		m := maps.Clone(nvme)
		if value == "" {
			delete(m, name)
		} else {
			m[name] = value
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    *BlockQueue
		wantErr string // a substring; empty when it must succeed
	}{
		{"nvme", nvme, &BlockQueue{ReadAheadBytes: 128 << 10, Scheduler: "none", NRRequests: 1023}, ""},
		{"rotational, mq-deadline", with("rotational", "1\n"), &BlockQueue{ReadAheadBytes: 128 << 10, Rotational: true, Scheduler: "none", NRRequests: 1023}, ""},
		{"scheduler picked from the list", with("scheduler", "none [mq-deadline] kyber\n"), &BlockQueue{ReadAheadBytes: 128 << 10, Scheduler: "mq-deadline", NRRequests: 1023}, ""},
		{"bio-based: scheduler none alone", with("scheduler", "none\n"), &BlockQueue{ReadAheadBytes: 128 << 10, Scheduler: "none", NRRequests: 1023}, ""},
		{"no scheduler", with("scheduler", ""), &BlockQueue{ReadAheadBytes: 128 << 10, NRRequests: 1023}, ""},
		{"no nr_requests", with("nr_requests", ""), &BlockQueue{ReadAheadBytes: 128 << 10, Scheduler: "none"}, ""},
		{"no read_ahead_kb: not describable", with("read_ahead_kb", ""), nil, ""},
		{"no rotational: not describable", with("rotational", ""), nil, ""},
		{"garbled read_ahead_kb", with("read_ahead_kb", "lots\n"), nil, "/q/read_ahead_kb: not an unsigned integer"},
		{"garbled rotational", with("rotational", "-1\n"), nil, "/q/rotational: not an unsigned integer"},
		{"garbled nr_requests", with("nr_requests", "1e3\n"), nil, "/q/nr_requests: not an unsigned integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			got, err := ParseBlockQueue("/q", blockQueueFiles(tc.files, &asked))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v; want one with %q", err, tc.wantErr)
			case (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want:
				t.Fatalf("got %+v; want %+v", got, tc.want)
			}
			// An attribute is read only while the queue can still be
			// described, in a fixed order.
			order := []string{"read_ahead_kb", "rotational", "scheduler", "nr_requests"}
			if !slices.Equal(asked, order[:len(asked)]) {
				t.Errorf("asked for %q", asked)
			}
		})
	}
}

// BlockQueue on a /sys tree: the queue directory, its blk-mq hardware
// queues, and the devices that have none.
func TestBlockQueue(t *testing.T) {
	sys := t.TempDir()
	host, err := NewFS(t.TempDir(), sys)
	if err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(sys, "block/nvme0n1")
	for name, v := range map[string]string{"read_ahead_kb": "128\n", "rotational": "0\n", "scheduler": "[none] mq-deadline\n", "nr_requests": "1023\n"} {
		hosttest.WriteFile(t, filepath.Join(dev, "queue", name), v)
	}
	for _, hctx := range []string{"0", "1", "2"} {
		if err := os.MkdirAll(filepath.Join(dev, "mq", hctx), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hosttest.WriteFile(t, filepath.Join(dev, "mq/not-a-queue"), "")
	hosttest.WriteFile(t, filepath.Join(sys, "block/sdb/queue/rotational"), "1\n") // no read_ahead_kb
	if err := os.MkdirAll(filepath.Join(sys, "block/nvme0n1p1"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		device  string
		want    *BlockQueue
		skipped []string
	}{
		{"nvme0n1", &BlockQueue{ReadAheadBytes: 128 << 10, Scheduler: "none", NRRequests: 1023, HWQueues: 3}, nil},
		{"nvme0n1p1", nil, nil}, // a partition: no queue directory
		{"nosuch", nil, nil},
		{"sdb", nil, []string{"block queue incomplete " + filepath.Join(sys, "block/sdb/queue")}},
	} {
		var skipped []string
		got, err := host.BlockQueue(tc.device, func(msg, path string, err error) {
			skipped = append(skipped, msg+" "+path)
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.device, err)
		}
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: got %+v; want %+v", tc.device, got, tc.want)
		}
		if !slices.Equal(skipped, tc.skipped) {
			t.Errorf("%s: skipped %q; want %q", tc.device, skipped, tc.skipped)
		}
	}
	// An attribute that is no sysfs attribute (past SysfsAttrBytes) fails
	// the read rather than reading as absent.
	huge := filepath.Join(sys, "block/sdc/queue")
	hosttest.WriteFile(t, filepath.Join(huge, "read_ahead_kb"), "128\n")
	hosttest.WriteFile(t, filepath.Join(huge, "rotational"), strings.Repeat("1", SysfsAttrBytes+1))
	if _, err := host.BlockQueue("sdc", func(string, string, error) {}); err == nil || !strings.Contains(err.Error(), "rotational") {
		t.Errorf("oversized attribute: error %v", err)
	}
}

// FuzzParseBlockQueue: any attribute values give a queue that reads them
// back, nil when read_ahead_kb or rotational is absent, or an error naming
// the file and staying short.
func FuzzParseBlockQueue(f *testing.F) {
	queue := "sys/devices/pci0000:3b/0000:3b:01.0/0000:3c:00.0/nvme/nvme0/nvme0n1/queue/"
	f.Add(hosttest.Seed(f, queue+"read_ahead_kb"), hosttest.Seed(f, queue+"rotational"),
		hosttest.Seed(f, queue+"scheduler"), hosttest.Seed(f, queue+"nr_requests"), uint8(0xf))
	vda := "sys/devices/pci0000:00/0000:00:05.0/virtio2/block/vda/queue/"
	f.Add(hosttest.Seed(f, vda+"read_ahead_kb"), hosttest.Seed(f, vda+"rotational"),
		hosttest.Seed(f, vda+"scheduler"), hosttest.Seed(f, vda+"nr_requests"), uint8(0x7))
	f.Add([]byte("18014398509481984\n"), []byte("2\n"), []byte("[a] [b]\n"), []byte(" 7 \n"), uint8(0xd))
	f.Fuzz(func(t *testing.T, readAhead, rotational, scheduler, nrRequests []byte, present uint8) {
		files := map[string]string{}
		for i, a := range []struct {
			name  string
			value []byte
		}{{"read_ahead_kb", readAhead}, {"rotational", rotational}, {"scheduler", scheduler}, {"nr_requests", nrRequests}} {
			if present&(1<<i) != 0 {
				files[a.name] = string(a.value)
			}
		}
		var asked []string
		var q *BlockQueue
		var err error
		hosttest.WithinHangLimit(t, func() { q, err = ParseBlockQueue("queue", blockQueueFiles(files, &asked)) })
		if err != nil {
			hosttest.CheckError(t, err, "queue/")
			return
		}
		_, hasReadAhead := files["read_ahead_kb"]
		_, hasRotational := files["rotational"]
		if q == nil {
			if hasReadAhead && hasRotational {
				t.Fatalf("no queue from %q", files)
			}
			return
		}
		kb, errKB := ParseUintAttr("", readAhead)
		rot, errRot := ParseUintAttr("", rotational)
		if !hasReadAhead || !hasRotational || errKB != nil || errRot != nil || q.ReadAheadBytes != kb*1024 || q.Rotational != (rot == 1) {
			t.Fatalf("queue %+v from %q", q, files)
		}
		if !bytes.Contains(scheduler, []byte(q.Scheduler)) || strings.ContainsAny(q.Scheduler, " \t\n") {
			t.Fatalf("scheduler %q from %q", q.Scheduler, scheduler)
		}
		_, hasNRRequests := files["nr_requests"]
		if n, err := ParseUintAttr("", nrRequests); !hasNRRequests && q.NRRequests != 0 || hasNRRequests && (err != nil || q.NRRequests != n) {
			t.Fatalf("nr_requests %d from %q", q.NRRequests, nrRequests)
		}
		if q.HWQueues != 0 {
			t.Fatalf("hardware queues %d from attributes", q.HWQueues)
		}
	})
}
