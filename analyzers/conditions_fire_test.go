package analyzers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
)

// disableRulesEnv names the rules (finding checks, class/sub_kind
// verdicts), comma-separated, that a run of this package's test binary
// switches off through disabledRules.
const disableRulesEnv = "GPUDIAG_TEST_DISABLE_RULES"

func TestMain(m *testing.M) {
	if v := os.Getenv(disableRulesEnv); v != "" {
		disabledRules = map[string]bool{}
		for _, r := range strings.Split(v, ",") {
			disabledRules[r] = true
		}
	}
	os.Exit(m.Run())
}

// TestSeedConditionTestsFire proves the coverage table's claims: a test
// claimed for a condition must fire the condition's rules, so with them
// switched off it must fail. For each diagnosed condition it runs this
// test binary again, once, with all the condition's rules off and only the
// claimed tests selected, and requires every one of them to fail; for a
// condition of several rules it also switches each rule off alone and
// requires at least one claimed test to fail, so that no rule is named
// without a test that fires it. A claim must be a test of this package,
// where the switch reaches.
func TestSeedConditionTestsFire(t *testing.T) {
	if os.Getenv(disableRulesEnv) != "" {
		t.Skip("a re-run with rules off")
	}
	own := map[string]bool{}
	files, _ := os.ReadDir(".")
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			own[m[1]] = true
		}
	}
	type run struct {
		id     string
		rules  []string
		tests  []string
		allOf  bool // every test must fail, else one
		failed map[string]bool
		err    error
	}
	var runs []*run
	for _, c := range seedConditions {
		if c.NotWhy != "" {
			continue
		}
		ok := true
		for _, tn := range c.Tests {
			if !own[tn] {
				t.Errorf("%s: claimed test %s is not a test of package analyzers: it cannot be re-run with the condition's rules off", c.ID, tn)
				ok = false
			}
		}
		if !ok {
			continue
		}
		runs = append(runs, &run{id: c.ID, rules: c.Checks, tests: c.Tests, allOf: true})
		if len(c.Checks) > 1 {
			for _, ch := range c.Checks {
				runs = append(runs, &run{id: c.ID, rules: []string{ch}, tests: c.Tests})
			}
		}
	}
	// Two at a time: the runs are short, and the machine is shared.
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.failed, r.err = runWithRulesOff(r.rules, r.tests)
		}()
	}
	wg.Wait()
	for _, r := range runs {
		if r.err != nil {
			t.Errorf("%s with %v off: %v", r.id, r.rules, r.err)
			continue
		}
		if r.allOf {
			for _, tn := range r.tests {
				if !r.failed[tn] {
					t.Errorf("%s: %s passes with %v off: it does not fire the condition", r.id, tn, r.rules)
				}
			}
		} else if len(r.failed) == 0 {
			t.Errorf("%s: every claimed test %v passes with %s off: no test fires it", r.id, r.tests, r.rules[0])
		}
	}
}

var testResult = regexp.MustCompile(`(?m)^--- (PASS|FAIL|SKIP): (Test\w+) `)

// runWithRulesOff runs the named tests of this binary with rules off and
// says which failed. Each test must have run.
func runWithRulesOff(rules, tests []string) (map[string]bool, error) {
	cmd := exec.Command(os.Args[0], "-test.run", "^("+strings.Join(tests, "|")+")$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), disableRulesEnv+"="+strings.Join(rules, ","))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, err
	}
	failed, seen := map[string]bool{}, map[string]bool{}
	for _, m := range testResult.FindAllStringSubmatch(out.String(), -1) {
		seen[m[2]] = true
		failed[m[2]] = failed[m[2]] || m[1] == "FAIL"
	}
	var missing []string
	for _, tn := range tests {
		if !seen[tn] {
			missing = append(missing, tn)
		}
		if !failed[tn] {
			delete(failed, tn)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%v did not run:\n%s", missing, out.String())
	}
	return failed, nil
}
