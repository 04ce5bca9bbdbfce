#!/usr/bin/env bash
# Overhead of gpudiag's eBPF programs, measured side by side in one run:
# fio random-read IOPS and loopback TCP throughput (tcpthroughput, beside
# this script), without the programs and with them attached, the runs
# alternated so that drift hits both alike. Prints each run, then the
# medians and the loss in percent. Throughput on a shared VM varies from run
# to run by more than the programs cost, so the attached runs also measure
# the programs' own run time (the kernel's BPF statistics) against the CPU
# time all CPUs were busy: "BPF share" is the part of the work the programs
# added, the loss a CPU-bound workload would see, measured to within the
# statistics' own cost (two clock reads per run, counted in).
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
#   FIO_DEVICE   a block device to read instead of a file in BENCH_DIR, or
#                "memory": a loop device over a file in /dev/shm, made for
#                the run. Reads from memory are bound by CPU alone, so the
#                programs' cost is all that varies between modes.
#   WORKLOADS    which to run: "fio tcp" (default), "fio" or "tcp"
#   FIO_JOBS     fio processes reading at once (default 1)
#   STATS        1 (default) measures the BPF share; 0 leaves the kernel's
#                run-time statistics off, as in production, so that the
#                throughput columns carry no measuring cost
#   REPS         runs per mode (default 3)
#   FIO_SECONDS  length of each fio run (default 10)
#   TCP_SECONDS  length of each TCP run (default 5)
#   FIO          fio binary (default: fio on PATH). For a machine that reaches
#                no package mirror, build one static where one is reachable:
#                apt-get source fio (deb-src enabled) and install libaio-dev,
#                then in its folder: ./configure --build-static --disable-numa
#                --disable-rdma --disable-rados --disable-rbd --disable-http
#                --disable-gfapi --disable-libnfs --disable-pmem --disable-tcmalloc
#                --disable-native --disable-xnvme --disable-libzbc --disable-dfs
#                && make
#   BIN_DIR      prebuilt attach and tcpthroughput (default: built with go)
#   BASE_BIN_DIR another build of attach (say, of an earlier commit) to
#                compare with: its modes "on-base" and "tracked-base" run
#                alternated with the others, in the same run
#
# To compare the programs with those of an earlier commit:
#   git worktree add /tmp/base <commit> && (cd /tmp/base && go build -o /tmp/base-bin/attach ./bpf/bench/attach)
#   sudo BASE_BIN_DIR=/tmp/base-bin bash bpf/bench/bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

BENCH_DIR=${BENCH_DIR:-/var/tmp}
WORKLOADS=${WORKLOADS:-fio tcp}
stats_flag=-stats
[ "${STATS:-1}" = 0 ] && stats_flag=
REPS=${REPS:-3}
FIO_SECONDS=${FIO_SECONDS:-10}
TCP_SECONDS=${TCP_SECONDS:-5}

FIO=${FIO:-fio}
if [[ $WORKLOADS == *fio* ]] && ! command -v "$FIO" >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null
fi

work=$(mktemp -d)
file="$BENCH_DIR/gpudiag-bench.$$"
attach_pid=
loopdev=
cleanup() {
	[ -n "$attach_pid" ] && kill "$attach_pid" 2>/dev/null || true
	rm -rf "$work"
	if [ -n "$loopdev" ]; then
		losetup -d "$loopdev"
		rm -f /dev/shm/gpudiag-bench.$$
	fi
	[ -z "${FIO_DEVICE:-}" ] && rm -f "$file"
}
trap cleanup EXIT

bin=${BIN_DIR:-$work}
if [ -z "${BIN_DIR:-}" ]; then
	go build -o "$bin/attach" ./bpf/bench/attach
	go build -o "$bin/tcpthroughput" ./bpf/bench/tcpthroughput
fi
if [ "${FIO_DEVICE:-}" = memory ]; then
	truncate -s 1G /dev/shm/gpudiag-bench.$$
	loopdev=$(losetup --find --show /dev/shm/gpudiag-bench.$$)
	FIO_DEVICE=$loopdev
fi
if [ -n "${FIO_DEVICE:-}" ]; then
	file=$FIO_DEVICE
elif [[ $WORKLOADS == *fio* ]]; then
	"$FIO" --name=layout --filename="$file" --size=1G --rw=write --bs=1M --direct=1 --output=/dev/null
fi

# attach MODE: off attaches nothing; on attaches; tracked also tracks this
# shell, so that the workloads it starts next are tracked by the kernel.
# The -base modes do the same with BASE_BIN_DIR's build.
attach() {
	local attach_bin=$bin/attach
	if [[ $1 == *-base ]]; then
		attach_bin=$BASE_BIN_DIR/attach
	fi
	case $1 in
	off) return 0 ;;
	on*) "$attach_bin" $stats_flag >"$work/attach.out" 2>>"$work/counted" & ;;
	tracked*) "$attach_bin" $stats_flag -track $$ >"$work/attach.out" 2>>"$work/counted" & ;;
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
	"$FIO" --name=randread --filename="$file" --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=32 --numjobs="${FIO_JOBS:-1}" --group_reporting \
		--runtime="$FIO_SECONDS" --time_based --output-format=terse --terse-version=3 | awk -F';' '{print $8}'
}

# tcp_mbps SIZE: loopback throughput in Mbit/s with SIZE-byte writes.
tcp_mbps() { "$bin/tcpthroughput" -seconds "$TCP_SECONDS" -write-size "$1"; }

# busy_ns: CPU time all CPUs spent outside idle, iowait and steal (time the
# hypervisor gave to others) since boot.
busy_ns() {
	awk -v hz="$(getconf CLK_TCK)" '/^cpu / {print ($2 + $3 + $4 + $7 + $8) * 1e9 / hz}' /proc/stat
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# Each run also reports the CPU time the whole machine was busy per unit of
# work (a request, or a KiB sent), which varies far less from run to run
# than throughput does on a shared VM: its increase over "off" is what the
# programs cost a workload bound by CPU.
declare -A results shares costs
run() { # run NAME MODE SECONDS UNITS_PER_VALUE COMMAND...
	local name=$1 mode=$2 seconds=$3 units=$4
	shift 4
	attach "$mode"
	local v b0 b1 busy cost share=
	b0=$(busy_ns)
	v=$("$@")
	b1=$(busy_ns)
	detach
	busy=$(awk -v a="$b0" -v b="$b1" 'BEGIN {print b - a}')
	cost=$(awk -v busy="$busy" -v v="$v" -v s="$seconds" -v u="$units" 'BEGIN {printf "%.0f", busy / (v * s * u)}')
	costs[$name/$mode]+="$cost "
	if [ "$mode" != off ] && [ -n "$stats_flag" ]; then
		share=$(awk -v bpf="$(awk '/^bpf_run_ns/ {print $2}' "$work/attach.out")" -v busy="$busy" \
			'BEGIN {printf "%.2f", bpf / busy * 100}')
		shares[$name/$mode]+="$share "
		share="  BPF share ${share}%"
	fi
	printf '%-28s %-13s %10s  CPU %6s ns/unit%s\n' "$name" "$mode" "$v" "$cost" "$share"
	results[$name/$mode]+="$v "
}

target=${FIO_DEVICE:-file on $(df --output=source "$BENCH_DIR" | tail -1)}
echo "kernel $(uname -r), $(nproc) CPUs, fio reads $target"
for rep in $(seq "$REPS"); do
	echo "--- repetition $rep"
	if [[ $WORKLOADS == *fio* ]]; then
		for mode in off on tracked ${BASE_BIN_DIR:+on-base tracked-base}; do
			run "fio randread 4k qd32 IOPS" "$mode" "$FIO_SECONDS" 1 fio_iops
		done
	fi
	if [[ $WORKLOADS == *tcp* ]]; then
		for mode in off on tracked ${BASE_BIN_DIR:+on-base tracked-base}; do
			# a Mbit is 122.07 KiB
			run "TCP 128K writes Mbit/s" "$mode" "$TCP_SECONDS" 122.0703125 tcp_mbps 131072
			run "TCP 4K writes Mbit/s" "$mode" "$TCP_SECONDS" 122.0703125 tcp_mbps 4096
		done
	fi
done

echo
echo "what the attached programs counted, per run:"
cat "$work/counted"
echo
# The unit of the CPU column: a request for fio, a KiB for TCP.
printf '%-28s %-13s %12s %9s %14s %9s %10s\n' workload mode median loss "CPU ns/unit" "CPU cost" "BPF share"
for name in "fio randread 4k qd32 IOPS" "TCP 128K writes Mbit/s" "TCP 4K writes Mbit/s"; do
	[ -n "${results[$name/off]:-}" ] || continue
	off=$(tr ' ' '\n' <<<"${results[$name/off]}" | grep . | median)
	off_cost=$(tr ' ' '\n' <<<"${costs[$name/off]}" | grep . | median)
	for mode in off on tracked on-base tracked-base; do
		[ -n "${results[$name/$mode]:-}" ] || continue
		v=$(tr ' ' '\n' <<<"${results[$name/$mode]}" | grep . | median)
		c=$(tr ' ' '\n' <<<"${costs[$name/$mode]}" | grep . | median)
		loss=$(awk -v a="$off" -v b="$v" 'BEGIN {printf "%.2f%%", (a - b) / a * 100}')
		extra=$(awk -v a="$off_cost" -v b="$c" 'BEGIN {printf "%.2f%%", (b - a) / a * 100}')
		share=-
		[ -n "${shares[$name/$mode]:-}" ] && share="$(tr ' ' '\n' <<<"${shares[$name/$mode]}" | grep . | median)%"
		if [ "$mode" = off ]; then
			loss=- extra=-
		fi
		printf '%-28s %-13s %12s %9s %14s %9s %10s\n' "$name" "$mode" "$v" "$loss" "$c" "$extra" "$share"
	done
done
