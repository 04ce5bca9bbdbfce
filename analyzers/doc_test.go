package analyzers

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the threshold table in docs/diagnosis.md")

const (
	docPath    = "../docs/diagnosis.md"
	thrStart   = "<!-- thresholds:start -->"
	thrEnd     = "<!-- thresholds:end -->"
	auditSrc   = "audit.go"
	classifier = "classify.go"
)

func thresholdTable() string {
	var b strings.Builder
	b.WriteString("| threshold | default | why |\n|---|---|---|\n")
	for _, d := range ThresholdDocs(DefaultThresholds) {
		b.WriteString("| " + d.Name + " | " + d.Value + " | " + d.Why + " |\n")
	}
	return b.String()
}

// docs/diagnosis.md's threshold table is generated from ThresholdDocs.
func TestDiagnosisDocTable(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, thrStart), strings.Index(s, thrEnd)
	if i < 0 || j < i {
		t.Fatal("docs/diagnosis.md lacks the threshold table markers")
	}
	table := thresholdTable()
	if *updateDoc {
		s = s[:i+len(thrStart)] + "\n" + table + s[j:]
		if err := os.WriteFile(docPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if strings.TrimSpace(s[i+len(thrStart):j]) != strings.TrimSpace(table) {
		t.Fatal("docs/diagnosis.md threshold table is stale; run: go test ./analyzers -run TestDiagnosisDocTable -update-doc")
	}
}

// Every finding check and every sub-kind the code can emit is documented.
func TestDiagnosisDocCoversChecksAndSubKinds(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range []string{auditSrc, "process.go", "comm.go", "placement.go", "gpuconfig.go", "storage.go", "hosttuning.go", "distributed.go", "kubelet.go", "limits.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	re := regexp.MustCompile(`(?:Check: |\bf\()"([a-z_]+)"`)
	found := 0
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		found++
		if !strings.Contains(string(doc), "`"+m[1]+"`") {
			t.Errorf("finding check %q is not documented in docs/diagnosis.md", m[1])
		}
	}
	if found < 15 {
		t.Fatalf("found only %d check names in %s; the pattern is broken", found, auditSrc)
	}
	for _, sub := range []string{SubTensor, SubMemoryBandwidth, SubOtherSM, SubNVLink, SubPCIePeerSHM, SubNetwork,
		SubStorageRead, SubH2DCopy, SubCPU, SubCPUQuota, SubNoProcess, SubWaiting, SubGPUDown} {
		if !strings.Contains(string(doc), sub) {
			t.Errorf("sub-kind %q is not documented", sub)
		}
	}
}
