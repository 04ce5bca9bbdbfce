package hostfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

const psiFixture = "some avg10=2.50 avg60=1.80 avg300=1.20 total=987654321\nfull avg10=0.00 avg60=0.10 avg300=0.00 total=12\n"

func TestParsePSI(t *testing.T) {
	p, err := ParsePSI("io", []byte(psiFixture))
	want := PSI{Some: PSILine{2.5, 1.8, 1.2, 987654321}, Full: PSILine{0, 0.1, 0, 12}, HasSome: true, HasFull: true}
	if err != nil || p != want {
		t.Fatalf("%+v, %v; want %+v", p, err, want)
	}
	someOnly := strings.SplitAfter(psiFixture, "\n")[0]
	if p, err := ParsePSI("cpu", []byte(someOnly)); err != nil || !p.HasSome || p.HasFull {
		t.Errorf("some line only: %+v, %v", p, err)
	}
	for name, data := range map[string]string{
		"empty":           "",
		"cut in a line":   psiFixture[:30],
		"nan":             strings.Replace(psiFixture, "avg10=2.50", "avg10=nan", 1),
		"negative":        strings.Replace(psiFixture, "avg60=1.80", "avg60=-5", 1),
		"over 100":        strings.Replace(psiFixture, "avg300=1.20", "avg300=100.5", 1),
		"bad total":       strings.Replace(psiFixture, "total=12", "total=x", 1),
		"not key=value":   strings.Replace(psiFixture, "avg10=0.00", "avg10", 1),
		"unknown line":    psiFixture + "partial avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"a field missing": strings.Replace(psiFixture, " total=987654321", "", 1),
	} {
		if p, err := ParsePSI("io", []byte(data)); err == nil {
			t.Errorf("%s: parsed as %+v; want an error", name, p)
		}
	}
	later := strings.Replace(psiFixture, " total=12", " total=12 avg600=0.00", 1)
	if _, err := ParsePSI("io", []byte(later)); err != nil {
		t.Errorf("a field a later kernel adds: %v", err)
	}
}

// On the reference host's files and, where the kernel has PSI, this
// machine's, the parser and procfs agree.
func TestParsePSIAgreesWithProcfs(t *testing.T) {
	for _, root := range []string{"testdata/host/proc", "/proc"} {
		files, _ := filepath.Glob(filepath.Join(root, "pressure", "*"))
		if len(files) == 0 {
			continue
		}
		pfs, err := procfs.NewFS(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			res := filepath.Base(path)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParsePSI(path, b)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if root == "/proc" {
				continue // the file moved between the two reads
			}
			want, err := pfs.PSIStatsForResource(res)
			if err != nil {
				t.Fatal(err)
			}
			if got.HasSome != (want.Some != nil) || got.HasFull != (want.Full != nil) ||
				(got.HasSome && (got.Some.TotalMicroseconds != want.Some.Total || got.Some.Avg10 != want.Some.Avg10)) ||
				(got.HasFull && (got.Full.TotalMicroseconds != want.Full.Total || got.Full.Avg300 != want.Full.Avg300)) {
				t.Errorf("%s: %+v; procfs %+v %+v", path, got, want.Some, want.Full)
			}
		}
	}
}

func FuzzParsePSI(f *testing.F) {
	f.Add([]byte(psiFixture))
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePSI("io", b)
		if err != nil {
			return
		}
		for _, l := range []PSILine{p.Some, p.Full} {
			for _, a := range []float64{l.Avg10, l.Avg60, l.Avg300} {
				if !(a >= 0 && a <= 100) {
					t.Fatalf("average %v accepted from %q", a, b)
				}
			}
		}
	})
}
