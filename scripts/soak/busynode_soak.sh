#!/usr/bin/env bash
# Memory soak of the busy 8-GPU node benchmark (collectors/busynode_test.go,
# TestBusyNodeCost): the daemon's live collectors sample a torchrun-shaped
# process tree with every clock of the daemon compressed SPEED times (48: a
# day of sampling cycles in 30 minutes), while every rank's DataLoader-like
# workers are replaced by new processes every CHURN seconds. The test writes
# a CSV row of the test process's memory, heap, goroutines, descriptors and
# window size every 10 s; busynode_report.py then prints a table, one row
# per twelfth of the run, and a verdict (last twelfth against the second).
#
# Usage: scripts/soak/busynode_soak.sh   (settings through env vars)
#   SPEED=48              time compression (sampling hours = wall hours × SPEED)
#   SECONDS_RUN=1800      wall seconds of sampling (plus about 20 s of setup)
#   CHURN=60              wall seconds between worker epochs (0: no churn)
#   WORKERS=8             workers per rank (8 ranks)
#   OUT=.dist/soak        where the test binary, log, CSV and summary go
# Exit status: 0 flat, 1 the test failed or memory grew.
#
# It loads the machine: the tree is 73 processes, and at SPEED=48 the
# daemon samples 48 times a second. The test's own percentages are per wall
# second, so they are SPEED times a real node's.
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

SPEED="${SPEED:-48}"
SECONDS_RUN="${SECONDS_RUN:-1800}"
CHURN="${CHURN:-60}"
WORKERS="${WORKERS:-8}"
OUT="${OUT:-.dist/soak}"

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

mkdir -p "$OUT"
bin="$OUT/collectors.test"
series="$OUT/busynode_series.csv"
log "building $bin"
go test -c -o "$bin" ./collectors

log "soak: ${SECONDS_RUN} s at ${SPEED}x ($(python3 -c "print(round($SECONDS_RUN*$SPEED/3600, 2))") sampling hours), workers churned every ${CHURN} s"
rc=0
GPUDIAG_BUSY_NODE_SECONDS="$SECONDS_RUN" \
	GPUDIAG_BUSY_NODE_SPEED="$SPEED" \
	GPUDIAG_BUSY_NODE_CHURN="$CHURN" \
	GPUDIAG_BUSY_NODE_WORKERS="$WORKERS" \
	GPUDIAG_BUSY_NODE_SERIES="$series" \
	GPUDIAG_BUSY_NODE_OUT="$OUT/busynode_result.json" \
	"$bin" -test.run '^TestBusyNodeCost$' -test.count=1 -test.v \
	-test.timeout "$((${SECONDS_RUN%.*} + 600))s" >"$OUT/busynode_soak.log" 2>&1 || rc=$?
tail -n 40 "$OUT/busynode_soak.log"
if [ "$rc" -ne 0 ]; then
	log "the test failed (exit $rc); log: $OUT/busynode_soak.log"
fi
[ -s "$series" ] || { log "no series written"; exit 1; }

report_rc=0
python3 scripts/soak/busynode_report.py --speed "$SPEED" "$series" | tee "$OUT/busynode_summary.md" || report_rc=$?
if [ "$rc" -ne 0 ] || [ "$report_rc" -ne 0 ]; then
	exit 1
fi
