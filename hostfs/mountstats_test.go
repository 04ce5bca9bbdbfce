package hostfs

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// mountstatsNFS is an NFS 4.2 mount's block as the 6.x kernel writes it,
// shortened to the lines the parser reads and a few around them.
const mountstatsNFS = `device rootfs mounted on / with fstype rootfs
device /dev/nvme0n1p1 mounted on /scratch with fstype ext4
device filer01:/export/imagenet mounted on /data with fstype nfs4 statvers=1.1
	opts:	rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,acregmax=60,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.5,local_lock=none
	age:	86400
	caps:	caps=0x3fff7,wtmult=512,dtsize=32768,bsize=0,namlen=255
	events:	0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
	bytes:	107374182400 0 0 0 107374182400 0 26214400 0
	RPC iostats version: 1.1  p/v: 100003/4 (nfs)
	xprt:	tcp 870 1 1 0 0 102400 102400 0 204800 0 2 0 0
	per-op statistics
	        NULL: 0 0 0 0 0 0 0 0 0
	        READ: 102400 102410 0 17203200 107387289600 5120 819200 829440 0
	       WRITE: 0 0 0 0 0 0 0 0 0
device tmpfs mounted on /dev/shm with fstype tmpfs
device old:/home mounted on /home with fstype nfs statvers=1.1
	opts:	rw,vers=3,rsize=65536,wsize=65536
	per-op statistics
	        READ: 10 10 0 1200 655360 1 40 42
`

func TestParseMountStats(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []NFSMount
		errHas     string
	}{
		{name: "nfs4 and nfs3 among local mounts", text: mountstatsNFS, want: []NFSMount{
			{MountPoint: "/data", Server: "filer01:/export/imagenet", FSType: "nfs4", RSize: 1048576,
				ReadOps: 102400, ReadBytes: 107387289600, ReadQueueMillis: 5120, ReadRTTMillis: 819200, ReadExecuteMillis: 829440, ReadRetransmission: 10},
			{MountPoint: "/home", Server: "old:/home", FSType: "nfs", RSize: 65536,
				ReadOps: 10, ReadBytes: 655360, ReadQueueMillis: 1, ReadRTTMillis: 40, ReadExecuteMillis: 42}}},
		{name: "no NFS", text: "device rootfs mounted on / with fstype rootfs\n", want: nil},
		{name: "mounted before its first READ", text: "device s:/e mounted on /d with fstype nfs4 statvers=1.1\n\topts:\trw\n",
			want: []NFSMount{{MountPoint: "/d", Server: "s:/e", FSType: "nfs4"}}},
		{name: "bad device line", text: "device s:/e on /d\n", errHas: "line 1"},
		{name: "short READ", text: "device s:/e mounted on /d with fstype nfs4\n\tREAD: 1 2 3\n", errHas: "line 2"},
		{name: "bad READ counter", text: "device s:/e mounted on /d with fstype nfs4\n\tREAD: 1 2 3 4 5 6 -7 8\n", errHas: "field 7"},
		{name: "bad rsize", text: "device s:/e mounted on /d with fstype nfs4\n\topts:\trsize=big\n", errHas: "rsize"},
	} {
		got, err := ParseMountStats(strings.NewReader(tc.text), "mountstats")
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.HasPrefix(err.Error(), "mountstats") {
				t.Errorf("%s: error %v; want one naming the file and %q", tc.name, err, tc.errHas)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func FuzzParseMountStats(f *testing.F) {
	f.Add([]byte(mountstatsNFS))
	f.Add([]byte("device a mounted on /b with fstype nfs\n\tREAD: 1 0 0 0 18446744073709551615 0 0 0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []NFSMount
		var err error
		hosttest.WithinHangLimit(t, func() { got, err = ParseMountStats(strings.NewReader(string(data)), "mountstats") })
		if err != nil {
			hosttest.CheckError(t, err, "mountstats: ")
			return
		}
		// What was read renders as a mountstats file that reads the same.
		var b strings.Builder
		for _, m := range got {
			if strings.ContainsAny(m.Server+m.MountPoint+m.FSType, " \t\n\r\v\f\x85\xa0") {
				return // a field the kernel would have escaped
			}
			fmt.Fprintf(&b, "device %s mounted on %s with fstype %s\n\topts:\trsize=%d\n\tREAD: %d %d 0 0 %d %d %d %d\n",
				m.Server, m.MountPoint, m.FSType, m.RSize, m.ReadOps, m.ReadOps+m.ReadRetransmission, m.ReadBytes,
				m.ReadQueueMillis, m.ReadRTTMillis, m.ReadExecuteMillis)
		}
		again, err := ParseMountStats(strings.NewReader(b.String()), "mountstats")
		if err != nil || len(again) != len(got) || (len(got) > 0 && !reflect.DeepEqual(again, got)) {
			t.Fatalf("%+v rendered reads back as %+v, %v", got, again, err)
		}
	})
}
