package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	dockerfile = "../Dockerfile"
	goMod      = "../go.mod"
)

// dockerfileLines returns the Dockerfile's instructions (continuations joined)
// and its comment lines.
func dockerfileLines(t *testing.T) (instructions, comments []string) {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var cont strings.Builder
	for _, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") {
			comments = append(comments, line)
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		line = cont.String() + line
		cont.Reset()
		if line != "" {
			instructions = append(instructions, line)
		}
	}
	return instructions, comments
}

// The official golang image sets GOTOOLCHAIN=local: a builder older than
// go.mod's go line cannot build the module, and a floating tag (golang:1.26)
// lags behind a patch release go.mod already asks for. The builder is pinned
// to exactly go.mod's version, and the runtime image is the builder's Debian
// release (the binary links its glibc).
func TestDockerfileBuilderMatchesGoMod(t *testing.T) {
	b, err := os.ReadFile(goMod)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	want := string(m[1])
	instructions, _ := dockerfileLines(t)
	var goVersion string
	var froms []string
	for _, in := range instructions {
		f := strings.Fields(in)
		switch strings.ToUpper(f[0]) {
		case "ARG":
			if k, v, ok := strings.Cut(f[1], "="); ok && k == "GO_VERSION" && len(froms) == 0 {
				goVersion = v
			}
		case "FROM":
			froms = append(froms, f[1])
		}
	}
	if goVersion != want {
		t.Errorf("Dockerfile ARG GO_VERSION=%q; go.mod says go %s", goVersion, want)
	}
	if len(froms) != 2 {
		t.Fatalf("FROM lines %v; want the builder and the runtime", froms)
	}
	build := regexp.MustCompile(`^golang:\$\{GO_VERSION\}-([a-z]+)$`).FindStringSubmatch(froms[0])
	run := regexp.MustCompile(`^debian:([a-z]+)-slim(@sha256:[0-9a-f]{64})?$`).FindStringSubmatch(froms[1])
	if build == nil || run == nil {
		t.Fatalf("FROM %s / FROM %s; want golang:${GO_VERSION}-<release> and debian:<release>-slim", froms[0], froms[1])
	}
	if build[1] != run[1] {
		t.Errorf("builder on Debian %s, runtime on Debian %s: the binary needs the builder's glibc", build[1], run[1])
	}
}

// The daemon accepts the Dockerfile's CMD and the flags its comments give
// for running as a non-root user.
func TestDaemonAcceptsDockerfileArguments(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the daemon")
	}
	instructions, comments := dockerfileLines(t)
	var cmd, entrypoint []string
	for _, in := range instructions {
		kw, rest, _ := strings.Cut(in, " ")
		var into *[]string
		switch strings.ToUpper(kw) {
		case "CMD":
			into = &cmd
		case "ENTRYPOINT":
			into = &entrypoint
		default:
			continue
		}
		if err := json.Unmarshal([]byte(rest), into); err != nil {
			t.Fatalf("%s is not in exec (JSON) form: %v", in, err)
		}
	}
	if len(entrypoint) != 1 || entrypoint[0] != "/usr/bin/gpudiag" || len(cmd) == 0 {
		t.Fatalf("ENTRYPOINT %q CMD %q", entrypoint, cmd)
	}
	var nonRoot []string
	for _, c := range comments {
		for _, f := range strings.Fields(c) {
			if strings.HasPrefix(f, "--path.") || strings.HasPrefix(f, "--no-collector.") || strings.HasPrefix(f, "--collector.") {
				nonRoot = append(nonRoot, f)
			}
		}
	}
	if len(nonRoot) == 0 {
		t.Fatal("the Dockerfile's comments give no flags for a non-root run")
	}
	bin := filepath.Join(t.TempDir(), "gpudiag")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/exporter").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for what, flags := range map[string][]string{"CMD": cmd, "non-root": nonRoot} {
		out, err := exec.Command(bin, append(flags, "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("%s arguments %v: %v\n%s", what, flags, err, out)
		}
	}
}
