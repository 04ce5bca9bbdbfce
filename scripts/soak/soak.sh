#!/usr/bin/env bash
# Soak: the daemon replays a real trace over and over (--replay.loop) at high
# speed until HOURS of trace time have passed, while a Prometheus server
# scrapes /metrics every second and a client asks /diagnose every few
# seconds. Afterwards the daemon's own series (heap, goroutines, resident
# memory, file descriptors, window size) are read back from Prometheus into a
# CSV and summarised every 2 trace-hours (docs/performance.md, "Soak").
#
# Every GPU sample of the trace goes through the engine, the window and the
# analyzers as in a live run; the live collectors' own Sample code is not
# exercised (replay stands in for it).
#
# Usage: scripts/soak/soak.sh   (settings through env vars)
#   HOURS=24 SPEED=100            trace hours to replay, at this multiple of real time
#                                 (24 h at 100x: 14.5 minutes; the daemon alone
#                                 replays about 870x on a 2-vCPU VM)
#   TRACE=testdata/traces/allreduce_nvlink_nccl_log.gdrec
#   DIAGNOSE_EVERY=2              seconds between /diagnose requests
#   STEP=1                        seconds between the CSV's rows (Prometheus answers
#                                 at most 11,000 rows: raise it for runs over 3 hours of wall time)
#   OUT=.dist/soak                where the CSV, summary, logs and TSDB go
#   PORT=19910 PROM_PORT=19990    loopback ports of the daemon and Prometheus
#   GPUDIAG_BIN=...               skip building and use this binary
# Exit status: 0 flat (or too short to judge), 1 growth found or the run failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C

HOURS="${HOURS:-24}"
SPEED="${SPEED:-100}"
TRACE="${TRACE:-testdata/traces/allreduce_nvlink_nccl_log.gdrec}"
DIAGNOSE_EVERY="${DIAGNOSE_EVERY:-2}"
STEP="${STEP:-1}"
OUT="${OUT:-.dist/soak}"
PORT="${PORT:-19910}"
PROM_PORT="${PROM_PORT:-19990}"

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

for tool in curl prometheus python3; do
	command -v "$tool" >/dev/null || die "$tool is required"
done
for n in HOURS SPEED DIAGNOSE_EVERY STEP PORT PROM_PORT; do
	[[ "${!n}" =~ ^[1-9][0-9]*$ ]] || die "$n must be a positive whole number, not '${!n}'"
done
[ -r "$TRACE" ] || die "no trace at $TRACE"

if [ -z "${GPUDIAG_BIN:-}" ]; then
	. scripts/lib.sh
	ensure_go
	log "building gpudiag"
	make build BINARY=.dist/gpudiag >/dev/null
	GPUDIAG_BIN=.dist/gpudiag
fi

rm -rf "$OUT"
mkdir -p "$OUT/query"
daemon="http://127.0.0.1:$PORT"
prom="http://127.0.0.1:$PROM_PORT"

pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}
trap cleanup EXIT

# wait_up URL: until URL answers 200, at most 30 s.
wait_up() {
	for _ in $(seq 300); do
		curl -sf -o /dev/null "$1" && return 0
		sleep 0.1
	done
	die "$1 did not come up"
}

# trace_time: the newest replayed GPU sample's time, Unix seconds.
trace_time() {
	curl -sf "$daemon/metrics" |
		awk '$1 == "gpudiag_collector_last_success_timestamp_seconds{collector=\"gpu\"}" {printf "%.0f\n", $2}'
}

log "daemon: replaying $TRACE in a loop at ${SPEED}x"
"$GPUDIAG_BIN" --replay="$TRACE" --replay.loop --replay.speed="$SPEED" \
	--web.listen-address="127.0.0.1:$PORT" >"$OUT/gpudiag.log" 2>&1 &
daemon_pid=$!
pids+=("$daemon_pid")
wait_up "$daemon/metrics"

cat >"$OUT/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: gpudiag
    static_configs:
      - targets: ["127.0.0.1:$PORT"]
EOF
log "prometheus: scraping every second"
prometheus --config.file="$OUT/prometheus.yml" --storage.tsdb.path="$OUT/tsdb" \
	--web.listen-address="127.0.0.1:$PROM_PORT" >"$OUT/prometheus.log" 2>&1 &
pids+=("$!")
wait_up "$prom/-/ready"
# Count trace time from Prometheus's first scrape, where the curve starts.
for _ in $(seq 100); do
	curl -sf "$prom/api/v1/query" --data-urlencode 'query=up{job="gpudiag"} == 1' | grep -q '"value"' && break
	sleep 0.1
done
start="$(date +%s)"

# /diagnose: the latest verdict and an analysis over 5 minutes, in turn.
(
	i=0
	while :; do
		q="format=json"
		[ $((i % 2)) -eq 1 ] && q="format=json&window=5m"
		curl -s -o /dev/null -w '%{http_code}\n' "$daemon/diagnose?$q" || echo "error"
		i=$((i + 1))
		sleep "$DIAGNOSE_EVERY"
	done
) >"$OUT/diagnose_codes.txt" &
pids+=("$!")

first="$(trace_time)"
[ -n "$first" ] || die "the daemon exports no GPU sample time"
guard=$((start + HOURS * 3600 * 3 / SPEED + 300)) # hang guard: 3x the planned wall time
while :; do
	sleep 10
	kill -0 "$daemon_pid" 2>/dev/null || die "the daemon exited; see $OUT/gpudiag.log"
	now="$(trace_time)"
	elapsed=$((now - first))
	read -r load1 _ </proc/loadavg
	echo "$(date +%s) $load1" >>"$OUT/loadavg.txt" # the machine's load, to read the curve by
	log "$(awk -v e="$elapsed" 'BEGIN {printf "%.2f", e / 3600}') of $HOURS trace hours, load average $load1"
	[ "$elapsed" -ge $((HOURS * 3600)) ] && break
	[ "$(date +%s)" -lt "$guard" ] || die "hang guard: $elapsed trace seconds by $(date +%T)"
done
sleep 2 # the last scrapes
end="$(date +%s)"
log "done: $((end - start)) s of wall time"

# The CSV's columns and the PromQL that reads each.
columns=(
	"trace_time_seconds=gpudiag_collector_last_success_timestamp_seconds{collector=\"gpu\"}"
	"heap_inuse_bytes=go_memstats_heap_inuse_bytes"
	"heap_alloc_bytes=go_memstats_heap_alloc_bytes"
	"heap_goal_bytes=go_memstats_next_gc_bytes"
	"goroutines=go_goroutines"
	"threads=go_threads"
	"resident_bytes=process_resident_memory_bytes"
	"open_fds=process_open_fds"
	"window_bytes=sum(gpudiag_window_bytes)"
	"window_samples=sum(gpudiag_window_samples)"
	"gpu_window_span_seconds=gpudiag_window_span_seconds{collector=\"gpu\"}"
	"cpu_cores=rate(process_cpu_seconds_total[10s])"
	"scrape_seconds=scrape_duration_seconds{job=\"gpudiag\"}"
	"up=up{job=\"gpudiag\"}"
)
for c in "${columns[@]}"; do
	curl -sf "$prom/api/v1/query_range" --data-urlencode "query=${c#*=}" \
		--data-urlencode "start=$start" --data-urlencode "end=$end" --data-urlencode "step=$STEP" \
		>"$OUT/query/${c%%=*}.json" || die "query ${c#*=} failed"
done

python3 scripts/soak/report.py --out "$OUT" --columns "$(printf '%s\n' "${columns[@]%%=*}")" \
	--trace "$TRACE" --speed "$SPEED" --hours "$HOURS"
