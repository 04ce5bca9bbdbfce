#!/usr/bin/env bash
# The daemon's cost on a busy 8-GPU node at two git revisions, side by side.
#
# collectors/busynode_test.go (TestBusyNodeCost) starts a torchrun-shaped
# process tree (8 ranks mapping libnccl, WORKERS DataLoader workers each,
# ~40 OS threads and 4 loopback TCP connections per process) and runs the
# daemon's default collectors, with 8 fake GPUs listing the ranks, for
# SECONDS_EACH seconds; it reports the test process's CPU time, allocation,
# resident memory and each collector's time. This script builds that test at
# both revisions (each in a worktree of its own; the test file of this
# checkout is copied into a revision that lacks it) and runs the two binaries
# alternately, A B A B ..., so that a change in the machine's load falls on
# both sides alike; then it prints the medians per side and B/A.
#
# Usage: scripts/bench/busynode.sh [REV_A [REV_B]]   (default: main HEAD)
#   SECONDS_EACH=600   length of one run
#   REPEATS=2          runs per side
#   WORKERS=8          DataLoader workers per rank
#   RESULTS=.dist/bench/busynode   where the JSON of each run and the table go
#   GOMAXPROCS=1       the daemon's default (--runtime.gomaxprocs); both sides
#                      run with it, also revisions whose test did not set it
# Needs go and python3. Run it on a quiet machine: the numbers are CPU time.
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

REV_A="${1:-main}"
REV_B="${2:-HEAD}"
SECONDS_EACH="${SECONDS_EACH:-600}"
REPEATS="${REPEATS:-2}"
WORKERS="${WORKERS:-8}"
RESULTS="${RESULTS:-.dist/bench/busynode}"
run_gomaxprocs="${GOMAXPROCS:-1}"

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}
for tool in go python3 git; do
	command -v "$tool" >/dev/null || die "$tool is required"
done
for n in SECONDS_EACH REPEATS; do
	[[ "${!n}" =~ ^[1-9][0-9]*$ ]] || die "$n must be a positive integer"
done
[[ "$WORKERS" =~ ^[0-9]+$ ]] || die "WORKERS must be a non-negative integer"

root="$(pwd)"
test_file="$root/collectors/busynode_test.go"
[ -f "$test_file" ] || die "$test_file is missing"
sha_a="$(git rev-parse --verify "$REV_A^{commit}")" || die "no revision $REV_A"
sha_b="$(git rev-parse --verify "$REV_B^{commit}")" || die "no revision $REV_B"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
work="$(mktemp -d /tmp/gpudiag-busynode.XXXXXX)"
cleanup() {
	for side in a b; do
		if [ -d "$work/$side" ]; then
			git -C "$root" worktree remove --force "$work/$side" >/dev/null 2>&1 || true
		fi
	done
	git -C "$root" worktree prune || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

build() { # side sha
	local side=$1 sha=$2 dir="$work/$1"
	git -C "$root" worktree add --detach "$dir" "$sha" >/dev/null 2>&1 || die "git worktree add $sha failed"
	if [ ! -f "$dir/collectors/busynode_test.go" ]; then
		cp "$test_file" "$dir/collectors/busynode_test.go"
		log "$side: $(git -C "$root" log --oneline -1 "$sha") lacks the benchmark; copied it in"
	fi
	log "$side: building the test binary at $(git -C "$root" log --oneline -1 "$sha")"
	(cd "$dir" && go test -c -o "$work/$side.test" ./collectors) || die "building $side failed"
}
build a "$sha_a"
build b "$sha_b"

rm -f "$RESULTS"/[ab]-*.json
for i in $(seq 1 "$REPEATS"); do
	for side in a b; do
		log "run $i/$REPEATS, side $side, $SECONDS_EACH s"
		(cd "$work/$side/collectors" &&
			GOMAXPROCS="$run_gomaxprocs" GPUDIAG_BUSY_NODE_SECONDS="$SECONDS_EACH" GPUDIAG_BUSY_NODE_WORKERS="$WORKERS" \
				GPUDIAG_BUSY_NODE_OUT="$RESULTS/$side-$i.json" \
				"$work/$side.test" -test.run '^TestBusyNodeCost$' -test.count=1 -test.v \
				-test.timeout "$((SECONDS_EACH + 600))s") >"$RESULTS/$side-$i.log" 2>&1 ||
			{ tail -40 "$RESULTS/$side-$i.log" >&2; die "run $i of $side failed (log: $RESULTS/$side-$i.log)"; }
	done
done

python3 - "$RESULTS" "$REPEATS" "$(git log --oneline -1 "$sha_a")" "$(git log --oneline -1 "$sha_b")" <<'EOF' | tee "$RESULTS/table.md"
import json, statistics, sys
results, repeats, name_a, name_b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
runs = {s: [json.load(open(f"{results}/{s}-{i}.json")) for i in range(1, repeats + 1)] for s in "ab"}

def med(side, f):
    return statistics.median(f(r) for r in runs[side])

def coll(name, key):
    def f(r):
        for c in r["collectors"]:
            if c["name"] == name:
                return c[key]
        return float("nan")
    return f

r0 = runs["a"][0]
print(f"A: {name_a}\nB: {name_b}\n")
print(f"{r0['ranks']} ranks × {r0['workers_per_rank']} workers = {r0['processes']} processes, "
      f"{r0['threads']} threads, {r0['tcp_connections']} TCP connections; {repeats} runs of "
      f"{r0['seconds']:.0f} s per side, alternated; medians\n")
rows = [
    ("CPU, % of one core", lambda r: r["cpu_percent_of_core"], "{:.3f}"),
    ("  user", lambda r: r["user_percent_of_core"], "{:.3f}"),
    ("  system", lambda r: r["sys_percent_of_core"], "{:.3f}"),
    ("allocations per second", lambda r: r["allocs_per_second"], "{:,.0f}"),
    ("allocated KiB per second", lambda r: r["alloc_bytes_per_second"] / 1024, "{:,.1f}"),
    ("GCs per minute", lambda r: r["gcs_per_minute"], "{:.1f}"),
    ("samples failed (timed out, all collectors)", lambda r: sum(c["failures"] for c in r["collectors"]), "{:.0f}"),
    ("RSS at start, MiB", lambda r: r["rss_start_kb"] / 1024, "{:.1f}"),
    ("RSS after 1 min, MiB", lambda r: r.get("rss_1min_kb", 0) / 1024, "{:.1f}"),
    ("RSS at end, MiB", lambda r: r["rss_end_kb"] / 1024, "{:.1f}"),
]
names = [c["name"] for c in r0["collectors"]]
for n in names:
    rows.append((f"{n}: CPU, % of one core",
                 lambda r, n=n: coll(n, "sample_cpu_percent")(r) + coll(n, "metrics_cpu_percent")(r), "{:.4f}"))
for n in names:
    if n != "(rest)":
        rows.append((f"{n}: wall ms per call", coll(n, "sample_wall_ms_per_call"), "{:.2f}"))
print("| | A | B | B/A |\n|---|---|---|---|")
for label, f, fmt in rows:
    a, b = med("a", f), med("b", f)
    ratio = f"{b / a:.2f}" if a else "–"
    print(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")
EOF
log "results: $RESULTS (a-*.json, b-*.json, logs, table.md)"
