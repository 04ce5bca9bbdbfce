#!/usr/bin/env bash
# Overhead of gpudiag's eBPF programs, measured side by side in one run:
# fio random-read IOPS and loopback TCP throughput (tcpthroughput, beside
# this script), without the programs and with them attached, the runs
# alternated so that drift hits both alike. Prints each run, then the
# medians and the loss in percent.
#
#   sudo bash bpf/bench/bench.sh
#
# Modes: "off" (nothing attached); "on" (programs attached, the workload
# not tracked: what every other process on a node pays); "tracked" (the
# workload is a child of a process tracked as a GPU process: what a GPU job
# pays, with per-process block I/O and TCP accounting on every request and
# socket call). Needs root and kernel BTF; installs fio from Debian when
# missing. Settings from the environment:
#   BENCH_DIR    directory on the disk to read (default /var/tmp)
#   REPS         runs per mode (default 3)
#   FIO_SECONDS  length of each fio run (default 10)
#   TCP_SECONDS  length of each TCP run (default 5)
#   FIO          fio binary (default: fio on PATH)
#   BIN_DIR      prebuilt attach and tcpthroughput (default: built with go)
set -euo pipefail
cd "$(dirname "$0")/../.."

BENCH_DIR=${BENCH_DIR:-/var/tmp}
REPS=${REPS:-3}
FIO_SECONDS=${FIO_SECONDS:-10}
TCP_SECONDS=${TCP_SECONDS:-5}

FIO=${FIO:-fio}
if ! command -v "$FIO" >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null
fi

work=$(mktemp -d)
file="$BENCH_DIR/gpudiag-bench.$$"
attach_pid=
cleanup() {
	[ -n "$attach_pid" ] && kill "$attach_pid" 2>/dev/null || true
	rm -rf "$work" "$file"
}
trap cleanup EXIT

bin=${BIN_DIR:-$work}
if [ -z "${BIN_DIR:-}" ]; then
	go build -o "$bin/attach" ./bpf/bench/attach
	go build -o "$bin/tcpthroughput" ./bpf/bench/tcpthroughput
fi
"$FIO" --name=layout --filename="$file" --size=1G --rw=write --bs=1M --direct=1 --output=/dev/null

# attach MODE: off attaches nothing; on attaches; tracked also tracks this
# shell, so that the workloads it starts next are tracked by the kernel.
attach() {
	case $1 in
	off) return ;;
	on) "$bin/attach" >"$work/attach.out" 2>>"$work/counted" & ;;
	tracked) "$bin/attach" -track $$ >"$work/attach.out" 2>>"$work/counted" & ;;
	esac
	attach_pid=$!
	for _ in $(seq 100); do
		grep -q attached "$work/attach.out" 2>/dev/null && return
		kill -0 "$attach_pid" 2>/dev/null || { cat "$work/counted" >&2; exit 1; }
		sleep 0.1
	done
	echo "the programs did not attach in 10 s" >&2
	exit 1
}

detach() {
	[ -z "$attach_pid" ] && return
	kill -TERM "$attach_pid"
	wait "$attach_pid"
	attach_pid=
}

fio_iops() {
	"$FIO" --name=randread --filename="$file" --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=32 \
		--runtime="$FIO_SECONDS" --time_based --output-format=terse --terse-version=3 | awk -F';' '{print $8}'
}

# tcp_mbps SIZE: loopback throughput in Mbit/s with SIZE-byte writes.
tcp_mbps() { "$bin/tcpthroughput" -seconds "$TCP_SECONDS" -write-size "$1"; }

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

declare -A results
run() { # run NAME MODE COMMAND...
	local name=$1 mode=$2
	shift 2
	attach "$mode"
	local v
	v=$("$@")
	detach
	printf '%-28s %-8s %s\n' "$name" "$mode" "$v"
	results[$name/$mode]+="$v "
}

echo "kernel $(uname -r), $(nproc) CPUs, fio file on $(df --output=source "$BENCH_DIR" | tail -1)"
for rep in $(seq "$REPS"); do
	echo "--- repetition $rep"
	for mode in off on tracked; do
		run "fio randread 4k qd32 IOPS" "$mode" fio_iops
	done
	for mode in off tracked; do
		run "TCP 128K writes Mbit/s" "$mode" tcp_mbps 131072
		run "TCP 4K writes Mbit/s" "$mode" tcp_mbps 4096
	done
done

echo
echo "what the attached programs counted, per run:"
cat "$work/counted"
echo
printf '%-28s %12s %12s %12s %9s %9s\n' workload off on tracked "loss on" "loss trk"
for name in "fio randread 4k qd32 IOPS" "TCP 128K writes Mbit/s" "TCP 4K writes Mbit/s"; do
	off=$(tr ' ' '\n' <<<"${results[$name/off]}" | grep . | median)
	on=-
	[ -n "${results[$name/on]:-}" ] && on=$(tr ' ' '\n' <<<"${results[$name/on]}" | grep . | median)
	tracked=$(tr ' ' '\n' <<<"${results[$name/tracked]}" | grep . | median)
	loss() { [ "$1" = - ] && echo - || awk -v a="$off" -v b="$1" 'BEGIN {printf "%.2f%%", (a - b) / a * 100}'; }
	printf '%-28s %12s %12s %12s %9s %9s\n' "$name" "$off" "$on" "$tracked" "$(loss "$on")" "$(loss "$tracked")"
done
