#!/usr/bin/env bash
# Run every native Go fuzz target of the module for a bounded time each:
# FUZZTIME per target (default 10s), FUZZ_TARGETS to run only the targets
# whose names match a regular expression. Go fuzzes one target per
# `go test -fuzz` invocation, so the targets are listed first with
# `go test -list` and run one after another; the script fails if any fails.
#
# When a target finds an input that fails, Go writes it to
# <package>/testdata/fuzz/<FuzzName>/<hash> and prints how to re-run it.
# Fix the parser and commit that file with the fix: plain `go test` runs
# every file there as a seed, so it stays a regression test. Those
# directories are the committed seed corpus; what the engine finds
# interesting on its own stays in the build cache ($(go env GOCACHE)/fuzz).
set -euo pipefail
shopt -s inherit_errexit # a package that fails to build fails the listing
cd "$(dirname "$0")/.."
start=$SECONDS
fuzztime="${FUZZTIME:-10s}"
only="${FUZZ_TARGETS:-.}"
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

# The packages whose test files declare a fuzz target, then their targets
# as `go test -list` names them. With -fuzz it builds the instrumented test
# binary that the runs below reuse, not a second, plain one for every
# package of the module (minutes on two CPUs).
pkgs="$(go list -f '{{.ImportPath}}{{range .TestGoFiles}} {{$.Dir}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$.Dir}}/{{.}}{{end}}' ./... |
	while read -r pkg files; do
		if [ -n "$files" ] && grep -q '^func Fuzz' $files; then echo "$pkg"; fi
	done)"
targets="$(for pkg in $pkgs; do
	go test -list '^Fuzz' -fuzz '^$' "$pkg" | sed -n "s|^\(Fuzz[A-Za-z0-9_]*\)\$|$pkg \1|p"
done)"
[ -n "$targets" ] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 1; }

# Go before 1.27 may end a run at its -fuzztime deadline with a bare
# "context deadline exceeded" and no failing input, a race in its fuzzing
# engine (golang/go#75804) that CPU contention makes likely: that is not a
# finding. Any failure with an input is.
toolchain_race() {
	grep -q '^    context deadline exceeded$' "$1" && ! grep -q 'Failing input written to' "$1"
}

failed=()
ran=0
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
while read -r pkg name; do
	[[ "$name" =~ $only ]] || continue
	ran=$((ran + 1))
	echo "== $name ($pkg, $fuzztime)"
	if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"; then
		continue
	fi
	if toolchain_race "$log"; then
		echo "fuzz.sh: $name: stopped by the fuzzing engine's deadline race (golang/go#75804), no failing input"
	else
		failed+=("$name ($pkg)")
	fi
done <<<"$targets"
echo "fuzz.sh: $ran of $(wc -l <<<"$targets") targets, ${fuzztime} each, in $((SECONDS - start))s with the build"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz.sh: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
