package analyzers

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the generated sections of docs/diagnosis.md (thresholds, seed conditions)")

const docPath = "../docs/diagnosis.md"

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
	checkGeneratedSection(t, docPath, "thresholds", thresholdTable())
}

// checkGeneratedSection compares the part of a doc between
// <!-- name:start --> and <!-- name:end --> with content, or rewrites it
// with -update-doc.
func checkGeneratedSection(t *testing.T, path, name, content string) {
	t.Helper()
	start, end := "<!-- "+name+":start -->", "<!-- "+name+":end -->"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, start), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %s markers %s … %s", path, name, start, end)
	}
	if *updateDoc {
		s = s[:i+len(start)] + "\n" + content + s[j:]
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if strings.TrimSpace(s[i+len(start):j]) != strings.TrimSpace(content) {
		t.Fatalf("%s: the %s section is stale; run: go test ./analyzers -run 'TestDiagnosisDocTable|TestSeedConditionCoverage' -update-doc", path, name)
	}
}

// Every finding check and every sub-kind the code can emit is documented.
func TestDiagnosisDocCoversChecksAndSubKinds(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	src := []byte(analyzerSource(t))
	re := regexp.MustCompile(`(?:Check: |\bf\()"([a-z_]+)"`)
	found := 0
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		found++
		if !strings.Contains(string(doc), "`"+m[1]+"`") {
			t.Errorf("finding check %q is not documented in docs/diagnosis.md", m[1])
		}
	}
	if found < 15 {
		t.Fatalf("found only %d check names; the pattern is broken", found)
	}
	subs := regexp.MustCompile(`\bSub\w+\s*=\s*"([a-z_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(subs) < 12 {
		t.Fatalf("found only %d sub-kinds; the pattern is broken", len(subs))
	}
	for _, m := range subs {
		if !strings.Contains(string(doc), m[1]) {
			t.Errorf("sub-kind %q is not documented", m[1])
		}
	}
}
