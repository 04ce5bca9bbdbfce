package nccl

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// corpusDir holds real NCCL_DEBUG=INFO excerpts from public issue threads,
// each with its source and the truth written by reading it (README.md
// there says how).
const corpusDir = "../testdata/nccl/corpus"

type corpusTruth struct {
	Source     string   `json:"source"`
	Note       string   `json:"note"`
	Versions   []string `json:"versions"`
	Network    string   `json:"network"`
	Transports []string `json:"transports"`
	GDR        string   `json:"gdr"`
	NICs       []string `json:"nics"`
	Fallbacks  []string `json:"fallbacks"`
}

// corpusFields are the labelled fields, in the order docs/diagnosis.md
// lists their accuracy.
var corpusFields = []string{"versions", "network", "transports", "gdr", "nics", "fallbacks"}

type corpusResult struct {
	name  string
	wrong map[string]string // field → "got X, want Y"
}

func runCorpus(t *testing.T) []corpusResult {
	t.Helper()
	truths, err := filepath.Glob(filepath.Join(corpusDir, "*.json"))
	if err != nil || len(truths) == 0 {
		t.Fatalf("corpus: %v (%d files)", err, len(truths))
	}
	var out []corpusResult
	for _, path := range truths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var want corpusTruth
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !strings.HasPrefix(want.Source, "https://github.com/") {
			t.Fatalf("%s: source %q is no public thread", path, want.Source)
		}
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		r := Analyze(feedFile(t, filepath.Join(corpusDir, name+".log")))
		res := corpusResult{name: name, wrong: map[string]string{}}
		check := func(field string, got, want any) {
			if !reflect.DeepEqual(got, want) {
				b1, _ := json.Marshal(got)
				b2, _ := json.Marshal(want)
				res.wrong[field] = "got " + string(b1) + ", want " + string(b2)
			}
		}
		check("versions", sorted(r.Versions), sorted(want.Versions))
		check("network", r.Network, want.Network)
		check("transports", sorted(r.Transports), sorted(want.Transports))
		check("gdr", r.GDR, want.GDR)
		check("nics", sorted(r.NICs), sorted(want.NICs))
		check("fallbacks", sorted(r.Fallbacks), sorted(want.Fallbacks))
		out = append(out, res)
	}
	return out
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	slices.Sort(out)
	return out
}

// TestCorpus reads every excerpt and holds each labelled field to at
// least 95% of the logs right; every miss is logged.
func TestCorpus(t *testing.T) {
	results := runCorpus(t)
	if len(results) < 40 {
		t.Fatalf("corpus holds %d excerpts; the issue asks for at least 40", len(results))
	}
	for _, res := range results {
		for _, f := range corpusFields {
			if w, ok := res.wrong[f]; ok {
				t.Logf("%s: %s %s", res.name, f, w)
			}
		}
	}
	for _, f := range corpusFields {
		right := 0
		for _, res := range results {
			if _, bad := res.wrong[f]; !bad {
				right++
			}
		}
		if right*100 < 95*len(results) {
			t.Errorf("%s: %d of %d logs right, below 95%%", f, right, len(results))
		}
	}
}

var updateCorpusDoc = flag.Bool("update-corpus-doc", false, "rewrite docs/diagnosis.md's corpus accuracy table from TestCorpus's results")

const (
	corpusDoc      = "../docs/diagnosis.md"
	corpusDocBegin = "<!-- nccl-corpus-accuracy: TestCorpusAccuracyDocumented writes this table (go test ./nccl -run TestCorpusAccuracyDocumented -update-corpus-doc) -->\n"
	corpusDocEnd   = "<!-- /nccl-corpus-accuracy -->\n"
)

// corpusTable renders the accuracy per field and the excerpts each misses.
func corpusTable(results []corpusResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| field | logs right (of %d) | accuracy | missed on |\n|---|---|---|---|\n", len(results))
	for _, f := range corpusFields {
		right := 0
		var missed []string
		for _, res := range results {
			if _, bad := res.wrong[f]; bad {
				missed = append(missed, "`"+res.name+"`")
			} else {
				right++
			}
		}
		m := "-"
		if len(missed) > 0 {
			m = strings.Join(missed, ", ")
		}
		fmt.Fprintf(&b, "| `%s` | %d | %.1f%% | %s |\n", f, right, 100*float64(right)/float64(len(results)), m)
	}
	return b.String()
}

// TestCorpusAccuracyDocumented holds docs/diagnosis.md's table to what the
// corpus test measures now.
func TestCorpusAccuracyDocumented(t *testing.T) {
	doc, err := os.ReadFile(corpusDoc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i, j := strings.Index(text, corpusDocBegin), strings.Index(text, corpusDocEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no corpus accuracy block (%q ... %q)", corpusDoc, corpusDocBegin, corpusDocEnd)
	}
	want := corpusTable(runCorpus(t))
	got := text[i+len(corpusDocBegin) : j]
	if got == want {
		return
	}
	if *updateCorpusDoc {
		if err := os.WriteFile(corpusDoc, []byte(text[:i+len(corpusDocBegin)]+want+text[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's corpus table is stale; run with -update-corpus-doc:\n got %s\nwant %s", corpusDoc, got, want)
}
