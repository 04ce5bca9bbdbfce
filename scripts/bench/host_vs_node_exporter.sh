#!/usr/bin/env bash
# Cost of gpudiag's host collectors against node_exporter reading the same
# ground, measured side by side on this machine.
#
# node_exporter collects when scraped, gpudiag on its own clock, so each is
# measured in its own unit and then put on the same footing:
#   node_exporter per scrape  = one collection + encoding
#   gpudiag per cycle         = one sample of each collector + its metrics
#                               prepared (no scrape during that span)
#   gpudiag per scrape        = encoding what the cycles prepared
# CPU time is utime+stime from /proc/<pid>/stat; allocation is the process's
# own go_memstats_alloc_bytes_total, read from its /metrics before and after.
# Each process's idle floor is measured first: node_exporter left
# unscraped, gpudiag with every collector off. Its CPU is subtracted; its
# allocation is reported but is below what the counter resolves (see solve).
# Both processes run one after the other, never together, each on a loopback
# port; scrapes go over one kept-alive connection with gzip, as Prometheus's.
#
# Usage: scripts/bench/host_vs_node_exporter.sh   (settings through env vars)
#   REPEATS=3 SPAN=60 IDLE_SPAN=30 SCRAPES=2000 INTERVAL=100ms
#   SCRAPE_EVERY=15 DEPLOY_INTERVAL=1   the deployment the summary projects to
#   RESULTS=.dist/bench/host_vs_node_exporter.txt
#   GPUDIAG_BIN=...        skip building gpudiag and use this binary
#   NODE_EXPORTER_BIN=...  use this node_exporter instead of go install's
#   STRACE=0               skip listing the files each side opens
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C

REPEATS="${REPEATS:-3}"
SPAN="${SPAN:-60}"
IDLE_SPAN="${IDLE_SPAN:-30}"
SCRAPES="${SCRAPES:-2000}"
INTERVAL="${INTERVAL:-100ms}"
SCRAPE_EVERY="${SCRAPE_EVERY:-15}"
DEPLOY_INTERVAL="${DEPLOY_INTERVAL:-1}"
RESULTS="${RESULTS:-.dist/bench/host_vs_node_exporter.txt}"
STRACE="${STRACE:-1}"
NODE_EXPORTER_VERSION="v1.12.1"

# The same ground on both sides. node_exporter's infiniband and netdev are
# default-on; gpudiag has no meminfo_numa, its numa collector covers it.
NE_COLLECTORS=(diskstats pressure meminfo_numa infiniband netdev)
GD_COLLECTORS=(diskstats pressure numa infiniband netdev)

# die also works from inside $(...): the subshell signals the script, whose
# TERM trap exits non-zero and so runs the cleanup.
script_pid=$$
trap 'exit 1' TERM
log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "error: $*"
	[ "$BASHPID" = "$script_pid" ] || kill -TERM "$script_pid"
	exit 1
}

for tool in curl awk getconf; do
	command -v "$tool" >/dev/null || die "$tool is required"
done
for n in REPEATS SPAN IDLE_SPAN SCRAPES SCRAPE_EVERY DEPLOY_INTERVAL; do
	[[ "${!n}" =~ ^[1-9][0-9]*$ ]] || die "$n must be a positive whole number, not '${!n}'"
done
HZ="$(getconf CLK_TCK)"

# --- binaries ---------------------------------------------------------------

. scripts/lib.sh
if [ -z "${GPUDIAG_BIN:-}" ] || [ -z "${NODE_EXPORTER_BIN:-}" ]; then
	ensure_go
fi
if [ -z "${GPUDIAG_BIN:-}" ]; then
	log "building gpudiag"
	make build BINARY=.dist/gpudiag >/dev/null
	GPUDIAG_BIN=.dist/gpudiag
fi
if [ -z "${NODE_EXPORTER_BIN:-}" ]; then
	NODE_EXPORTER_BIN="$(go env GOPATH)/bin/node_exporter"
	if [ ! -x "$NODE_EXPORTER_BIN" ]; then
		log "installing node_exporter $NODE_EXPORTER_VERSION"
		(cd /tmp && go install "github.com/prometheus/node_exporter@$NODE_EXPORTER_VERSION")
	fi
fi
[ -x "$GPUDIAG_BIN" ] || die "no gpudiag binary at $GPUDIAG_BIN"
[ -x "$NODE_EXPORTER_BIN" ] || die "no node_exporter binary at $NODE_EXPORTER_BIN"

# Every gpudiag collector not in GD_COLLECTORS is switched off, whatever
# collectors this build has.
mapfile -t gd_all < <("$GPUDIAG_BIN" --help 2>&1 | grep -o -- '--\[no-\]collector\.[a-z_]*' | sed 's/.*collector\.//' | sort -u)
[ ${#gd_all[@]} -gt 0 ] || die "could not list gpudiag's collectors from --help"
gd_host_args=(--collector.gpu.backend=none "--sample.interval=$INTERVAL")
gd_floor_args=(--collector.gpu.backend=none "--sample.interval=$INTERVAL")
for c in "${gd_all[@]}"; do
	gd_floor_args+=("--no-collector.$c")
	[[ " ${GD_COLLECTORS[*]} " == *" $c "* ]] || gd_host_args+=("--no-collector.$c")
done
for c in "${GD_COLLECTORS[@]}"; do
	[[ " ${gd_all[*]} " == *" $c "* ]] || die "gpudiag has no $c collector"
done
ne_args=(--collector.disable-defaults)
for c in "${NE_COLLECTORS[@]}"; do ne_args+=("--collector.$c"); done

mkdir -p "$(dirname "$RESULTS")"
work="$(mktemp -d)"
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

# --- process control and readings -------------------------------------------

# start NAME BINARY ARGS...: runs it on a free loopback port until /metrics
# answers; sets PID and PORT. Retries another port when another process took
# the one chosen.
start() {
	local name="$1" bin="$2"
	shift 2
	local try port
	for try in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 40000))
		"$bin" "$@" "--web.listen-address=127.0.0.1:$port" >"$work/$name.log" 2>&1 &
		PID=$!
		pids+=("$PID")
		local i
		for i in $(seq 100); do
			if curl -sf -o /dev/null "http://127.0.0.1:$port/metrics"; then
				PORT=$port
				return 0
			fi
			kill -0 "$PID" 2>/dev/null || break
			sleep 0.1
		done
		stop "$PID"
		grep -q "address already in use" "$work/$name.log" || {
			cat "$work/$name.log" >&2
			die "$name did not start"
		}
	done
	die "$name: no free port after 5 tries"
}

stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# What Prometheus 2.x and 3.x send when OpenMetrics is not asked for: both
# exporters answer in the text format, gzip-compressed.
ACCEPT='Accept: text/plain;version=0.0.4;q=0.9,*/*;q=0.1'

scrape() { # PORT FILE
	curl -sf --compressed -H "$ACCEPT" -o "$2" "http://127.0.0.1:$1/metrics" || die "scrape of port $1 failed"
}

# scrape_loop PORT N: N scrapes over one kept-alive connection, as Prometheus
# does; fails unless all N answer 200.
scrape_loop() {
	local ok
	ok="$(curl -s --compressed -H "$ACCEPT" -o /dev/null -w '%{http_code}\n' \
		"http://127.0.0.1:$1/metrics?n=[1-$2]" | grep -c '^200$' || true)"
	[ "$ok" -eq "$2" ] || die "only $ok of $2 scrapes of port $1 answered 200"
}

# snap PID: wall seconds, CPU ticks (utime+stime), read syscalls, bytes read.
# The command name can hold spaces and parentheses: fields are counted after
# its closing parenthesis.
snap() {
	local t ticks syscr rchar
	t="$(date +%s.%N)"
	ticks="$(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat")"
	syscr="$(awk '$1 == "syscr:" {print $2}' "/proc/$1/io")"
	rchar="$(awk '$1 == "rchar:" {print $2}' "/proc/$1/io")"
	echo "$t $ticks $syscr $rchar"
}

# metric FILE NAME [LABEL-SUBSTRING]: sum of the samples of NAME.
metric() {
	awk -v n="$2" -v l="${3:-}" '
		($1 == n || index($1, n "{") == 1) && (l == "" || index($1, l) > 0) { s += $NF; found = 1 }
		END { if (!found) exit 1; printf "%.17g\n", s }' "$1" || die "no $2 in $1"
}

series() { grep -vc '^#' "$1"; }

# The readings behind every number. A quiet span takes the stat readings
# between two scrapes, so it holds the process's background CPU (idle floor,
# or sampling for gpudiag) and no scrape's; its allocation readings, taken at
# the same point of each scrape, hold the background plus one scrape. A loop
# of N scrapes, with one reading scrape before and after, holds N+2 scrapes'
# CPU and N+1 scrapes' allocation, plus the background over its duration.
# Allocation is read from the process's own counter, which the Go runtime
# brings up to date when a per-CPU cache hands a span back: one reading can
# be off by what those caches hold, tens to hundreds of KiB. The spans and
# loops below allocate hundreds of MiB, so that is noise well under 1%.

# quiet PID PORT SECONDS NAME: prints seconds, CPU ticks, bytes allocated,
# read syscalls, bytes read; keeps the two scrapes as $work/NAME.{0,1}.
quiet() {
	local pid="$1" port="$2" span="$3" name="$4" s0 s1
	scrape "$port" "$work/$name.0"
	s0="$(snap "$pid")"
	sleep "$span"
	s1="$(snap "$pid")"
	scrape "$port" "$work/$name.1"
	deltas "$s0" "$s1" "$(metric "$work/$name.0" go_memstats_alloc_bytes_total)" \
		"$(metric "$work/$name.1" go_memstats_alloc_bytes_total)"
}

# loop PID PORT N: prints the same deltas over N+2 scrapes.
loop() {
	local pid="$1" port="$2" n="$3" s0 s1
	s0="$(snap "$pid")"
	scrape "$port" "$work/loop.0"
	scrape_loop "$port" "$n"
	scrape "$port" "$work/loop.1"
	s1="$(snap "$pid")"
	deltas "$s0" "$s1" "$(metric "$work/loop.0" go_memstats_alloc_bytes_total)" \
		"$(metric "$work/loop.1" go_memstats_alloc_bytes_total)"
}

deltas() { # SNAP0 SNAP1 ALLOC0 ALLOC1
	local t0 k0 r0 c0 t1 k1 r1 c1
	read -r t0 k0 r0 c0 <<<"$1"
	read -r t1 k1 r1 c1 <<<"$2"
	awk -v t0="$t0" -v t1="$t1" -v k0="$k0" -v k1="$k1" -v r0="$r0" -v r1="$r1" \
		-v c0="$c0" -v c1="$c1" -v a0="$3" -v a1="$4" \
		'BEGIN { printf "%.6f %d %.17g %d %d\n", t1 - t0, k1 - k0, a1 - a0, r1 - r0, c1 - c0 }'
}

# solve QUIET LOOP N [idle]: background rates and the cost of one scrape, from
#   quiet: cpu = bg_cpu*dt                 alloc = bg_alloc*dt + scrape
#   loop:  cpu = bg_cpu*T + (N+2)*scrape   alloc = bg_alloc*T + (N+1)*scrape
# Prints bg CPU s/s, bg bytes/s, bg read syscalls/s, bg bytes read/s, then
# per scrape CPU s, bytes allocated, read syscalls, bytes read.
# With "idle" (a process doing nothing between scrapes) the background
# allocation is printed but not taken out of the scrapes: an idle Go process
# allocates nothing the counter can resolve, so the estimate is only the
# counter's noise, and subtracting it would add that noise to the result.
solve() {
	local dt qk qa qr qc T lk la lr lc
	read -r dt qk qa qr qc <<<"$1"
	read -r T lk la lr lc <<<"$2"
	awk -v dt="$dt" -v qk="$qk" -v qa="$qa" -v qr="$qr" -v qc="$qc" \
		-v T="$T" -v lk="$lk" -v la="$la" -v lr="$lr" -v lc="$lc" -v n="$3" -v hz="$HZ" -v idle="${4:-}" 'BEGIN {
		cpu = qk / hz / dt
		alloc = (qa - la / (n + 1)) / (dt - T / (n + 1))
		syscr = qr / dt; rchar = qc / dt
		printf "%.9g %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n", cpu, alloc, syscr, rchar,
			(lk / hz - cpu * T) / (n + 2), (la - (idle ? 0 : alloc) * T) / (n + 1),
			(lr - syscr * T) / (n + 2), (lc - rchar * T) / (n + 2) }'
}

loadavg() { cut -d' ' -f1 /proc/loadavg; }

# --- one repeat -------------------------------------------------------------

# One row per repeat; the report reads columns by name.
cols=(run ne_scrape_cpu_s ne_scrape_alloc_B gd_cycle_cpu_s gd_cycle_alloc_B gd_scrape_cpu_s gd_scrape_alloc_B
	ne_idle_cpu_s_per_s ne_idle_alloc_B_per_s gd_floor_cpu_s_per_s gd_floor_alloc_B_per_s
	ne_floor_scrape_cpu_s ne_floor_scrape_alloc_B gd_floor_scrape_cpu_s gd_floor_scrape_alloc_B cycles cycles_min cycles_max collector_failures span_s
	ne_scrape_syscr ne_scrape_rchar_B gd_cycle_syscr gd_cycle_rchar_B ne_loop_s gd_loop_s load1_ne load1_gd)
col() {
	local i
	for i in "${!cols[@]}"; do [ "${cols[$i]}" = "$1" ] && echo $((i + 1)) && return; done
	die "no column $1"
}
rows="$work/rows"
: >"$rows"

run_once() {
	local r="$1" q l v
	declare -A row=([run]="$r")

	log "[$r/$REPEATS] node_exporter: ${IDLE_SPAN}s unscraped, then $SCRAPES scrapes"
	start node_exporter "$NODE_EXPORTER_BIN" "${ne_args[@]}"
	local ne_pid=$PID ne_port=$PORT
	scrape_loop "$ne_port" 20
	sleep 1
	row[load1_ne]="$(loadavg)"
	q="$(quiet "$ne_pid" "$ne_port" "$IDLE_SPAN" ne)"
	l="$(loop "$ne_pid" "$ne_port" "$SCRAPES")"
	read -r row[ne_idle_cpu_s_per_s] row[ne_idle_alloc_B_per_s] _ _ \
		row[ne_scrape_cpu_s] row[ne_scrape_alloc_B] row[ne_scrape_syscr] row[ne_scrape_rchar_B] \
		<<<"$(solve "$q" "$l" "$SCRAPES" idle)"
	row[ne_loop_s]="${l%% *}"
	scrape "$ne_port" "$work/ne.prom"
	stop "$ne_pid"

	# An exporter with no collector still serves its runtime, process and
	# build metrics; both sides' empty scrapes show what that part costs.
	# Its idle CPU is taken as the full node_exporter's, measured above.
	log "[$r/$REPEATS] node_exporter floor, no collector: $SCRAPES scrapes"
	start node_exporter-floor "$NODE_EXPORTER_BIN" --collector.disable-defaults
	local nf_pid=$PID nf_port=$PORT
	scrape_loop "$nf_port" 20
	l="$(loop "$nf_pid" "$nf_port" "$SCRAPES")"
	read -r _ _ _ _ row[ne_floor_scrape_cpu_s] row[ne_floor_scrape_alloc_B] _ _ <<<"$(solve "$q" "$l" "$SCRAPES" idle)"
	stop "$nf_pid"

	log "[$r/$REPEATS] gpudiag floor, every collector off: ${IDLE_SPAN}s unscraped, then $SCRAPES scrapes"
	start gpudiag-floor "$GPUDIAG_BIN" "${gd_floor_args[@]}"
	local fl_pid=$PID fl_port=$PORT
	scrape_loop "$fl_port" 20
	sleep 1
	q="$(quiet "$fl_pid" "$fl_port" "$IDLE_SPAN" floor)"
	l="$(loop "$fl_pid" "$fl_port" "$SCRAPES")"
	local floor_syscr floor_rchar
	read -r row[gd_floor_cpu_s_per_s] row[gd_floor_alloc_B_per_s] floor_syscr floor_rchar \
		row[gd_floor_scrape_cpu_s] row[gd_floor_scrape_alloc_B] _ _ <<<"$(solve "$q" "$l" "$SCRAPES" idle)"
	stop "$fl_pid"

	log "[$r/$REPEATS] gpudiag host collectors every $INTERVAL: ${SPAN}s unscraped, then $SCRAPES scrapes"
	start gpudiag "$GPUDIAG_BIN" "${gd_host_args[@]}"
	local gd_pid=$PID gd_port=$PORT
	sleep 3
	scrape_loop "$gd_port" 20
	row[load1_gd]="$(loadavg)"
	q="$(quiet "$gd_pid" "$gd_port" "$SPAN" gd)"
	l="$(loop "$gd_pid" "$gd_port" "$SCRAPES")"
	local bg_cpu bg_alloc bg_syscr bg_rchar
	read -r bg_cpu bg_alloc bg_syscr bg_rchar row[gd_scrape_cpu_s] row[gd_scrape_alloc_B] _ _ \
		<<<"$(solve "$q" "$l" "$SCRAPES")"
	row[gd_loop_s]="${l%% *}"
	row[span_s]="${q%% *}"
	scrape "$gd_port" "$work/gd.prom"
	stop "$gd_pid"

	# A cycle is one sample of every collector: the window's sample count of
	# each, averaged. Failures would make the cycles cheaper than they are.
	local c counts=() failures=0
	for c in "${GD_COLLECTORS[@]}"; do
		counts+=("$(awk -v a="$(metric "$work/gd.0" gpudiag_window_samples "collector=\"$c\"")" \
			-v b="$(metric "$work/gd.1" gpudiag_window_samples "collector=\"$c\"")" 'BEGIN { print b - a }')")
		failures=$((failures + $(awk -v a="$(metric "$work/gd.0" gpudiag_collector_failures_total "collector=\"$c\"")" \
			-v b="$(metric "$work/gd.1" gpudiag_collector_failures_total "collector=\"$c\"")" 'BEGIN { print b - a }')))
		[ "$(metric "$work/gd.1" gpudiag_collector_success "collector=\"$c\"")" = 1 ] ||
			die "gpudiag collector $c failing; its log: $(tail -3 "$work/gpudiag.log")"
	done
	row[collector_failures]=$failures
	read -r row[cycles] row[cycles_min] row[cycles_max] <<<"$(printf '%s\n' "${counts[@]}" |
		awk '{ s += $1; if (NR == 1 || $1 < lo) lo = $1; if ($1 > hi) hi = $1 } END { print s / NR, lo, hi }')"
	[ "${row[cycles_min]}" -gt 0 ] || die "gpudiag sampled nothing in ${SPAN}s"
	[ "$failures" -le $((row[cycles_min] / 100)) ] ||
		die "$failures gpudiag samples failed or timed out in ${SPAN}s: the machine is too busy for this interval"
	read -r row[gd_cycle_cpu_s] row[gd_cycle_alloc_B] row[gd_cycle_syscr] row[gd_cycle_rchar_B] <<<"$(
		awk -v dt="${row[span_s]}" -v cy="${row[cycles]}" -v bc="$bg_cpu" -v ba="$bg_alloc" -v br="$bg_syscr" \
			-v bb="$bg_rchar" -v fc="${row[gd_floor_cpu_s_per_s]}" \
			-v fr="$floor_syscr" -v fb="$floor_rchar" 'BEGIN {
			printf "%.9g %.9g %.9g %.9g\n", (bc - fc) * dt / cy, ba * dt / cy, (br - fr) * dt / cy, (bb - fb) * dt / cy }')"

	local line=()
	for c in "${cols[@]}"; do
		v="${row[$c]:-}"
		[ -n "$v" ] || die "no value for $c"
		line+=("$v")
	done
	echo "${line[*]}" >>"$rows"
	log "[$r/$REPEATS] node_exporter $(in_us "${row[ne_scrape_cpu_s]}") µs $(in_kib "${row[ne_scrape_alloc_B]}") KiB per scrape;" \
		"gpudiag $(in_us "${row[gd_cycle_cpu_s]}") µs $(in_kib "${row[gd_cycle_alloc_B]}") KiB per cycle (${row[cycles]} cycles)," \
		"$(in_us "${row[gd_scrape_cpu_s]}") µs $(in_kib "${row[gd_scrape_alloc_B]}") KiB per scrape"
}
in_us() { awk -v v="$1" 'BEGIN { printf "%.0f", v * 1e6 }'; }
in_kib() { awk -v v="$1" 'BEGIN { printf "%.1f", v / 1024 }'; }

# --- what each side reads ---------------------------------------------------

# opened PID [PORT]: the files each cycle (no PORT: the process samples on
# its own) or each scrape (PORT: scraped in a loop) opens, and the sockets it
# creates, per unit. Both sides read /proc/pressure/cpu once per unit (or,
# without PSI, /proc/diskstats), so its count is the number of units seen.
opened() {
	local pid="$1" port="${2:-}" st
	strace -f -qq -e trace=openat,socket -p "$pid" -o "$work/strace" 2>/dev/null &
	st=$!
	sleep 1
	if [ -n "$port" ]; then scrape_loop "$port" 50; else sleep 3; fi
	sleep 0.2
	kill "$st" 2>/dev/null || true
	wait "$st" 2>/dev/null || true
	awk -F'"' '/openat\(/ {print $2} / socket\(/ {sub(/^[0-9]+ +/, ""); sub(/\).*/, ")"); print}' "$work/strace" |
		sort | uniq -c | sort -rn >"$work/opened"
	awk '$2 == "/proc/pressure/cpu" {p = $1} $2 == "/proc/diskstats" {d = $1} END {
		n = p ? p : d
		if (!n) { print "(neither /proc/pressure/cpu nor /proc/diskstats read)"; exit }
		printf "%d units seen\n", n
		while ((getline line < FILENAME) > 0) {
			split(line, f, " "); c = f[1]; sub(/^ *[0-9]+ /, "", line)
			printf "%8.2f %s\n", c / n, line
		} }' "$work/opened"
}

strace_section() {
	command -v strace >/dev/null || {
		echo "(strace not installed)"
		return
	}
	start node_exporter "$NODE_EXPORTER_BIN" "${ne_args[@]}"
	local ne_pid=$PID ne_port=$PORT
	scrape_loop "$ne_port" 5
	echo "node_exporter, per scrape:"
	opened "$ne_pid" "$ne_port"
	stop "$ne_pid"
	start gpudiag "$GPUDIAG_BIN" "${gd_host_args[@]}"
	local gd_pid=$PID
	sleep 2
	echo
	echo "gpudiag, per sampling cycle (not scraped):"
	opened "$gd_pid"
	stop "$gd_pid"
}

# --- run and report ---------------------------------------------------------

log "gpudiag: $("$GPUDIAG_BIN" --version 2>&1 | head -1)"
log "node_exporter: $NODE_EXPORTER_BIN"
for r in $(seq "$REPEATS"); do run_once "$r"; done

# values NAME [SCALE]: one column of the rows, scaled, sorted.
values() { awk -v c="$(col "$1")" -v s="${2:-1}" '{ printf "%.17g\n", $c * s }' "$rows" | sort -g; }
# spread FORMAT: "median (min–max)" of sorted values on stdin.
spread() {
	awk -v f="$1" '{ v[NR] = $1 } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf f " (" f "–" f ")", m, v[1], v[NR] }'
}
median() { values "$1" | awk '{ v[NR] = $1 } END { printf "%.9g", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
us() { values "$1" 1e6 | spread %.0f; }
kib() { values "$1" 0.0009765625 | spread %.1f; }
# ratio CYCLES_PER_SCRAPE CPU|ALLOC: gpudiag's cycles and one scrape over
# node_exporter's scrape, per repeat, then median and spread.
ratio() {
	local g s n
	case "$2" in
	cpu) g=gd_cycle_cpu_s s=gd_scrape_cpu_s n=ne_scrape_cpu_s ;;
	alloc) g=gd_cycle_alloc_B s=gd_scrape_alloc_B n=ne_scrape_alloc_B ;;
	esac
	awk -v k="$1" -v g="$(col $g)" -v s="$(col $s)" -v n="$(col $n)" -v scrape="${3:-1}" \
		'{ printf "%.17g\n", (k * $g + scrape * $s) / $n }' "$rows" | sort -g | spread %.2f
}
# ratio_net CPU|ALLOC: as ratio 1, with each exporter's empty scrape taken
# out of its scrapes.
ratio_net() {
	local u
	case "$1" in
	cpu) u=cpu_s ;;
	alloc) u=alloc_B ;;
	esac
	awk -v g="$(col gd_cycle_$u)" -v s="$(col gd_scrape_$u)" -v f="$(col gd_floor_scrape_$u)" \
		-v n="$(col ne_scrape_$u)" -v nf="$(col ne_floor_scrape_$u)" \
		'{ printf "%.17g\n", ($g + $s - $f) / ($n - $nf) }' "$rows" | sort -g | spread %.2f
}
per_scrape="$(awk -v k="$DEPLOY_INTERVAL" -v e="$SCRAPE_EVERY" 'BEGIN { print e / k }')"

{
	echo "# gpudiag host collectors vs node_exporter, $(date -u +%FT%TZ)"
	echo "host: $(uname -r), $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
	echo "gpudiag: $("$GPUDIAG_BIN" --version 2>&1 | head -1)"
	echo "node_exporter: $NODE_EXPORTER_BIN, $(go version -m "$NODE_EXPORTER_BIN" 2>/dev/null |
		awk '$1 == "mod" {printf "%s %s", $2, $3} NR == 1 {sub(/^[^:]*: /, ""); printf "built with %s, ", $0}')"
	echo "gpudiag args: ${gd_host_args[*]}"
	echo "node_exporter args: ${ne_args[*]}"
	echo "repeats=$REPEATS span=${SPAN}s idle_span=${IDLE_SPAN}s scrapes=$SCRAPES interval=$INTERVAL CLK_TCK=$HZ"
	echo "block devices: $(awk '{printf "%s ", $3}' /proc/diskstats)"
	echo "network interfaces: $(ls /sys/class/net | tr '\n' ' ')"
	echo "infiniband devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ' || true)"
	echo "numa nodes: $(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l), pci devices: $(ls /sys/bus/pci/devices 2>/dev/null | wc -l)"
	echo "series per scrape: node_exporter $(series "$work/ne.prom"), gpudiag $(series "$work/gd.prom")"
	echo "node_exporter collector success: $(grep '^node_scrape_collector_success' "$work/ne.prom" |
		sed 's/.*collector="\([^"]*\)"} /\1=/' | tr '\n' ' ')"
	echo
	echo "## cost per unit: median (min–max) of $REPEATS repeats"
	echo "node_exporter per scrape:    CPU $(us ne_scrape_cpu_s) µs, alloc $(kib ne_scrape_alloc_B) KiB"
	echo "gpudiag per sampling cycle:  CPU $(us gd_cycle_cpu_s) µs, alloc $(kib gd_cycle_alloc_B) KiB" \
		"($(values cycles | spread %.0f) cycles in $(values span_s | spread %.1f) s)"
	echo "gpudiag per scrape:          CPU $(us gd_scrape_cpu_s) µs, alloc $(kib gd_scrape_alloc_B) KiB"
	echo "empty-exporter scrape (runtime, process, build metrics): node_exporter CPU $(us ne_floor_scrape_cpu_s) µs," \
		"alloc $(kib ne_floor_scrape_alloc_B) KiB; gpudiag CPU $(us gd_floor_scrape_cpu_s) µs, alloc $(kib gd_floor_scrape_alloc_B) KiB"
	echo
	echo "## gpudiag over node_exporter"
	echo "one cycle + one scrape vs one scrape (same freshness):  CPU $(ratio 1 cpu), alloc $(ratio 1 alloc)"
	echo "one cycle alone vs one scrape (collection only):        CPU $(ratio 1 cpu 0), alloc $(ratio 1 alloc 0)"
	echo "one cycle + one scrape vs one scrape, each side's empty-exporter scrape taken out (runtime metrics aside):" \
		"CPU $(ratio_net cpu), alloc $(ratio_net alloc)"
	echo "sampling every ${DEPLOY_INTERVAL}s, both scraped every ${SCRAPE_EVERY}s ($per_scrape cycles + one scrape vs one scrape):" \
		"CPU $(ratio "$per_scrape" cpu), alloc $(ratio "$per_scrape" alloc)"
	awk -v k="$DEPLOY_INTERVAL" -v e="$SCRAPE_EVERY" \
		-v nc="$(median ne_scrape_cpu_s)" -v na="$(median ne_scrape_alloc_B)" \
		-v ni="$(median ne_idle_cpu_s_per_s)" \
		-v gc="$(median gd_cycle_cpu_s)" -v ga="$(median gd_cycle_alloc_B)" \
		-v gsc="$(median gd_scrape_cpu_s)" -v gsa="$(median gd_scrape_alloc_B)" \
		-v fc="$(median gd_floor_cpu_s_per_s)" 'BEGIN {
		printf "  node_exporter: %.3f%% of a CPU, %.1f KiB/s allocated\n", 100 * (nc / e + ni), na / e / 1024
		printf "  gpudiag:       %.3f%% of a CPU, %.1f KiB/s allocated\n", 100 * (gc / k + gsc / e + fc), (ga / k + gsa / e) / 1024 }'
	echo
	echo "## idle floors (CPU subtracted; allocation not: it is within the counter's noise, see solve())"
	echo "node_exporter unscraped:      CPU $(us ne_idle_cpu_s_per_s) µs/s, alloc $(kib ne_idle_alloc_B_per_s) KiB/s"
	echo "gpudiag, every collector off: CPU $(us gd_floor_cpu_s_per_s) µs/s, alloc $(kib gd_floor_alloc_B_per_s) KiB/s"
	echo
	echo "## reads (/proc/<pid>/io)"
	echo "node_exporter per scrape: $(values ne_scrape_syscr | spread %.1f) read syscalls," \
		"$(kib ne_scrape_rchar_B) KiB (the HTTP request and netlink replies included)"
	echo "gpudiag per cycle:        $(values gd_cycle_syscr | spread %.1f) read syscalls, $(kib gd_cycle_rchar_B) KiB"
	echo
	echo "## raw rows"
	echo "# ${cols[*]}"
	cat "$rows"
	if [ "$STRACE" = 1 ]; then
		echo
		echo "## files opened and sockets created (strace, outside the timed runs; count per unit, path or socket)"
		strace_section
	fi
} >"$RESULTS.tmp"
mv "$RESULTS.tmp" "$RESULTS"
cat "$RESULTS"
log "results in $RESULTS"
