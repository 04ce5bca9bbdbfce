#!/usr/bin/env bash
# Proof that the Dockerfile builds and its image runs, on a real container
# engine (podman, from Debian). Needs root on a Debian (bookworm) host with
# access to a Debian mirror and the Go module proxy; needs no container
# registry: the two base images the Dockerfile names are made here, under the
# names it uses, so the Dockerfile is built unchanged:
#   docker.io/library/debian:<release>-slim  a minbase Debian root made with
#     mmdebstrap (docs, man pages and locales left out, as the slim image does)
#   docker.io/library/golang:<GO_VERSION>-<release>  that root plus gcc,
#     libc6-dev, make, git, pkg-config, ca-certificates and Go at /usr/local/go
#     with the official image's environment (GOPATH=/go, GOTOOLCHAIN=local).
# Then `podman build --pull=never` and four runs of the image:
#   default     the image's CMD, root, the host's /proc and /sys mounted
#   nonroot     --user 65534:65534 with the per-process collectors off
#   nonroot-all --user 65534:65534 with every default collector
#   daemonset   what deploy/kubernetes grants: host PID and network, read-only
#               root, every capability dropped but SYS_PTRACE and
#               DAC_READ_SEARCH, no-new-privileges
# each checked over HTTP (/healthz, /metrics, /diagnose) and in its log.
# Exits non-zero on any failed check; removes its containers on exit.
#
# Everything lives in a private podman store under $STATE (default
# /var/tmp/gpudiag-container), so the stand-in bases never shadow real ones
# in the default store. Re-runs reuse the bases and the build cache;
# COLD=1 starts from nothing, REBUILD_BASES=1 remakes only the bases.
# Results are in docs/validation.md ("Container image").
# shellcheck disable=SC2016 # bash -c '...' scripts get their values as arguments
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

STATE="${STATE:-/var/tmp/gpudiag-container}"
RUNROOT="${RUNROOT:-/run/gpudiag-container}"
IMAGE="${IMAGE:-localhost/gpudiag:test}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
MAX_IMAGE_MB="${MAX_IMAGE_MB:-150}"
# The host's CA bundle is mounted into the build's RUN steps: where egress
# goes through a TLS-inspecting proxy (as on the machine this was written
# on), only the host trusts its CA. A plain host's bundle is the same one
# Debian's ca-certificates ships. HOST_CA=0 leaves it out.
HOST_CA="${HOST_CA:-1}"

start=$SECONDS
phase() { printf '\n== %s (%ds)\n' "$*" $((SECONDS - start)); }
failures=0
check() {
	local what=$1
	shift
	if "$@"; then
		printf 'ok    %s\n' "$what"
	else
		printf 'FAIL  %s\n' "$what"
		failures=$((failures + 1))
	fi
}

# mmdebstrap --mode=root and rootful podman.
[ "$(id -u)" -eq 0 ] || exec sudo -E bash "$0" "$@"
# One run at a time per store: runs share the bases, the image tag and the
# build cache (and a build is heavy).
mkdir -p "$(dirname "$STATE")"
exec 9>"$STATE.lock"
flock 9

phase "packages"
ensure_packages podman runc crun conmon containernetworking-plugins iptables mmdebstrap curl ca-certificates python3 git
podman --version
cgroups="v1"
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && cgroups="v2"
[ "$cgroups" = v1 ] && [ -d /sys/fs/cgroup/unified ] && cgroups="hybrid v1/v2 ($(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null || true) on v2)"
echo "kernel $(uname -r), cgroups $cgroups, runc $(runc --version | awk 'NR == 1 {print $3}'), crun $(crun --version | awk 'NR == 1 {print $3}')"

# What the Dockerfile asks for.
GO_VERSION="$(awk -F= '/^ARG GO_VERSION=/ {print $2; exit}' Dockerfile)"
froms=()
while read -r img; do froms+=("${img//\$\{GO_VERSION\}/$GO_VERSION}"); done < <(awk 'toupper($1) == "FROM" {print $2}' Dockerfile)
[ ${#froms[@]} -eq 2 ] || { echo "expected two FROM lines, got: ${froms[*]}" >&2; exit 1; }
GOLANG_BASE="docker.io/library/${froms[0]}"
DEBIAN_BASE="docker.io/library/${froms[1]}"
RELEASE="${froms[1]#debian:}"
RELEASE="${RELEASE%-slim}"
echo "Dockerfile: builder $GOLANG_BASE, runtime $DEBIAN_BASE (Debian $RELEASE), Go $GO_VERSION; go.mod: go $(awk '$1 == "go" {print $2}' go.mod)"

pm() { podman --root "$STATE/storage" --runroot "$RUNROOT" ${RUNTIME:+--runtime "$RUNTIME"} "$@"; }

if [ "${COLD:-0}" = 1 ] && [ -d "$STATE" ]; then
	phase "cold: removing $STATE"
	pm rm -a -f -t 0 >/dev/null 2>&1 || true
	pm rmi -a -f >/dev/null 2>&1 || true
	rm -rf "$STATE" "$RUNROOT"
fi
mkdir -p "$STATE/bases" "$STATE/out"

debian_root() { # OUT.tar [mmdebstrap options...]
	local out=$1
	shift
	mmdebstrap --variant=minbase --mode=root --format=tar \
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
		"$@" "$RELEASE" "$out.tmp" \
		"deb $MIRROR $RELEASE main" "deb $MIRROR $RELEASE-updates main" \
		"deb $SECURITY_MIRROR $RELEASE-security main" > "$out.log" 2>&1 ||
		{ tail -20 "$out.log" >&2; return 1; }
	grep -E '^(W:|I: success)' "$out.log" || true
	mv "$out.tmp" "$out"
}

# goroot_of VERSION: a Go tree of exactly that release, from the Go module
# proxy (golang.org/toolchain@v0.0.1-goVERSION.linux-ARCH, executable bits set
# by the go command).
goroot_of() {
	local want=$1 gobin dir
	for gobin in "$(command -v go || true)" /usr/local/go/bin/go; do
		[ -x "$gobin" ] || continue
		dir="$(cd / && GOTOOLCHAIN="go$want" "$gobin" env GOROOT 2>/dev/null)" || continue
		if [ -x "$dir/bin/go" ] && [ "$(cd / && "$dir/bin/go" env GOVERSION)" = "go$want" ]; then
			echo "$dir"
			return 0
		fi
	done
	ensure_go >&2
	dir="$(cd / && GOTOOLCHAIN="go$want" go env GOROOT)"
	[ "$(cd / && "$dir/bin/go" env GOVERSION)" = "go$want" ] || { echo "no Go $want" >&2; return 1; }
	echo "$dir"
}

phase "engine"
# Import the runtime base first: the probe below runs it.
have_image() { pm image exists "$1"; }
if [ "${REBUILD_BASES:-0}" = 1 ] || ! have_image "$DEBIAN_BASE"; then
	slim="$STATE/bases/debian-$RELEASE-slim.tar"
	[ "${REBUILD_BASES:-0}" = 1 ] && rm -f "$slim"
	[ -s "$slim" ] || { echo "mmdebstrap $RELEASE minbase -> $slim"; debian_root "$slim"; }
	pm import -q --change 'CMD ["bash"]' "$slim" "$DEBIAN_BASE" >/dev/null
fi
# Which OCI runtime and limits work here. Podman's defaults ask crun for
# RLIMIT_NOFILE 1048576; raising a hard limit needs CAP_SYS_RESOURCE, which a
# sandboxed root may lack. crun refuses hybrid cgroup v1/v2 hosts whose v2
# hierarchy holds a controller. The first of these that starts a container
# is used for every build and run below.
RUNTIME=""
RUN_LIMITS=()
nofile="$(ulimit -Hn)"
[ "$nofile" = unlimited ] && nofile=1048576
nproc="$(ulimit -Hu)"
{ [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ]; } && nproc=4096
found=""
for rt in "" runc; do
	for lim in "" "--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"; do
		RUNTIME="$rt"
		# shellcheck disable=SC2206
		RUN_LIMITS=($lim)
		if err="$(pm run --rm "${RUN_LIMITS[@]}" "$DEBIAN_BASE" true 2>&1)"; then
			found=1
			break 2
		fi
		echo "runtime ${rt:-crun (default)}, limits ${lim:-(default)}: $(tail -1 <<<"$err")"
	done
done
[ -n "$found" ] || { echo "no runtime could start a container" >&2; exit 1; }
echo "using: podman ${RUNTIME:+--runtime $RUNTIME }run ${RUN_LIMITS[*]:-}"

phase "builder base $GOLANG_BASE"
if [ "${REBUILD_BASES:-0}" = 1 ] || ! have_image "$GOLANG_BASE"; then
	golang="$STATE/bases/golang-$GO_VERSION-$RELEASE.tar"
	[ "${REBUILD_BASES:-0}" = 1 ] && rm -f "$golang"
	if [ ! -s "$golang" ]; then
		goroot="$(goroot_of "$GO_VERSION")"
		echo "Go $GO_VERSION from $goroot; mmdebstrap $RELEASE minbase + build tools -> $golang"
		debian_root "$golang" \
			--include=gcc,libc6-dev,make,git,pkg-config,ca-certificates,netbase \
			--customize-hook="mkdir -p \"\$1/usr/local/go\" && cp -a '$goroot/.' \"\$1/usr/local/go/\" && chmod -R u+w \"\$1/usr/local/go\"" \
			--customize-hook='mkdir -p "$1/go/src" "$1/go/bin" && chmod -R 1777 "$1/go"'
	fi
	pm import -q \
		--change "ENV GOLANG_VERSION=$GO_VERSION" \
		--change 'ENV GOTOOLCHAIN=local' \
		--change 'ENV GOPATH=/go' \
		--change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'WORKDIR /go' \
		--change 'CMD ["bash"]' \
		"$golang" "$GOLANG_BASE" >/dev/null
fi
check "builder base runs go$GO_VERSION with GOTOOLCHAIN=local" \
	test "$(pm run --rm "${RUN_LIMITS[@]}" "$GOLANG_BASE" go env GOVERSION GOTOOLCHAIN | tr '\n' ' ')" = "go$GO_VERSION local "
pm images --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E '^docker.io/library/' || true

phase "build context (.dockerignore)"
ctxfile="$STATE/context.Containerfile"
printf 'FROM %s\nCOPY . /ctx\n' "$DEBIAN_BASE" > "$ctxfile"
pm build --pull=never -q -f "$ctxfile" -t localhost/gpudiag-context:check . >/dev/null
ctx="$(pm run --rm "${RUN_LIMITS[@]}" localhost/gpudiag-context:check sh -c 'ls -A /ctx | tr "\n" " "; echo; du -sk /ctx | cut -f1')"
pm rmi -f localhost/gpudiag-context:check >/dev/null
echo "top level: $(head -1 <<<"$ctx")"
echo "size: $(tail -1 <<<"$ctx") KiB"
check "build context leaves out .git, .dist and .whl" bash -c '! grep -qwE "\.git|\.dist|\.whl" <<<"$1"' _ "$(head -1 <<<"$ctx")"

phase "podman build $IMAGE"
VERSION="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
build_volumes=()
[ "$HOST_CA" = 1 ] && [ -s /etc/ssl/certs/ca-certificates.crt ] &&
	build_volumes=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
build_start=$SECONDS
pm build --pull=never --network=host "${build_volumes[@]}" \
	--build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
	-t "$IMAGE" . > "$STATE/out/build.log" 2>&1 || { tail -40 "$STATE/out/build.log"; exit 1; }
grep -E '^(\[[0-9]/[0-9]\] STEP|--> Using cache|go build|Successfully)' "$STATE/out/build.log" | sed 's/^/  /'
echo "build: $((SECONDS - build_start)) s"
size="$(pm image inspect -f '{{.Size}}' "$IMAGE")"
pm images --format '{{.Repository}}:{{.Tag}}  {{.Size}}' "$IMAGE"
echo "image size: $size bytes"
check "image is at most $MAX_IMAGE_MB MB ($((size / 1000000)) MB)" test "$size" -le $((MAX_IMAGE_MB * 1000000))
check "image labels carry VERSION and REVISION" test \
	"$(pm image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}} {{index .Config.Labels "org.opencontainers.image.revision"}}' "$IMAGE")" = "$VERSION $REVISION"
check "image runs as root by default (no USER)" test -z "$(pm image inspect -f '{{.Config.User}}' "$IMAGE")"
ver="$(pm run --rm "${RUN_LIMITS[@]}" "$IMAGE" --version 2>&1)"
awk '{print "  " $0}' <<<"$ver"
check "gpudiag --version names $VERSION and go$GO_VERSION" bash -c 'grep -q "version $1" <<<"$3" && grep -q "go$2" <<<"$3"' _ "$VERSION" "$GO_VERSION" "$ver"

phase "runs"
names=(default nonroot nonroot-all daemonset)
cleanup() {
	for n in "${names[@]}"; do pm rm -f -t 0 "gpudiag-validate-$n" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
cleanup
mounts=(-v /proc:/host/proc:ro -v /sys:/host/sys:ro)
paths=(--path.procfs=/host/proc --path.sysfs=/host/sys)
perprocess_off=(--no-collector.gpuprocess --no-collector.ncclproc --no-collector.nccl --no-collector.tcp --no-collector.dataset)
# Four free ports on 127.0.0.1, one per run.
read -r -a ports < <(python3 -c 'import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
port() { case $1 in default) echo "${ports[0]}" ;; nonroot) echo "${ports[1]}" ;; nonroot-all) echo "${ports[2]}" ;; daemonset) echo "${ports[3]}" ;; esac; }
run() { pm run -d --name "gpudiag-validate-$1" "${RUN_LIMITS[@]}" "${@:2}" >/dev/null; }
run default -p "127.0.0.1:$(port default):10910" "${mounts[@]}" "$IMAGE"
run nonroot --user 65534:65534 -p "127.0.0.1:$(port nonroot):10910" "${mounts[@]}" "$IMAGE" "${paths[@]}" "${perprocess_off[@]}"
run nonroot-all --user 65534:65534 -p "127.0.0.1:$(port nonroot-all):10910" "${mounts[@]}" "$IMAGE"
run daemonset --pid=host --network=host --read-only --cap-drop=ALL --cap-add=SYS_PTRACE --cap-add=DAC_READ_SEARCH \
	--security-opt=no-new-privileges "${mounts[@]}" "$IMAGE" "${paths[@]}" \
	--web.listen-address="127.0.0.1:$(port daemonset)" --log.format=json
for n in "${names[@]}"; do
	for _ in $(seq 60); do
		[ "$(curl -s -m 2 "http://127.0.0.1:$(port "$n")/healthz" 2>/dev/null)" = ok ] && break
		sleep 0.5
	done
done
# Every collector samples once a second; let each run a few times.
sleep 4

all_collectors="cpu dataset diskstats gpu gpuprocess infiniband kubelet nccl ncclproc netdev numa podresources pressure tcp tuning"
unprivileged_collectors="cpu diskstats gpu infiniband kubelet netdev numa podresources pressure tuning"
for n in "${names[@]}"; do
	c="gpudiag-validate-$n"
	out="$STATE/out/$n"
	p="$(port "$n")"
	curl -s -m 5 "http://127.0.0.1:$p/healthz" > "$out.healthz" || true
	curl -s -m 5 "http://127.0.0.1:$p/metrics" > "$out.metrics" || true
	curl -s -m 5 "http://127.0.0.1:$p/diagnose?format=json" > "$out.diagnose.json" || true
	pm logs "$c" > "$out.log" 2>&1 || true
	pid="$(pm inspect -f '{{.State.Pid}}' "$c")"
	uid="$(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "?")"
	capeff="$(awk '/^CapEff:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "?")"
	echo "-- $n: $(pm inspect -f '{{.Config.User}} {{.Config.Cmd}}' "$c" | sed 's/^ /root /'); uid $uid, CapEff $capeff, $(grep -c '^gpudiag_' "$out.metrics") gpudiag_ samples"
	sed 's/^/   log: /' "$out.log"
	grep -E '^gpudiag_(gpu_backend_info|nccl_process_scan_unread_processes\{reason="permission"\})' "$out.metrics" | sed 's/^/   /'
	case $n in
	default | nonroot-all | daemonset) want="$all_collectors" ;;
	nonroot) want="$unprivileged_collectors" ;;
	esac
	check "$n: still running" test "$(pm inspect -f '{{.State.Running}}' "$c")" = true
	check "$n: /healthz says ok" test "$(cat "$out.healthz")" = ok
	check "$n: gpudiag_build_info has version $VERSION and go$GO_VERSION" \
		grep -qE "^gpudiag_build_info\{.*goversion=\"go$GO_VERSION\".*version=\"$VERSION\"\} 1$" "$out.metrics"
	check "$n: gpudiag_gpu_backend_info{backend=\"none\"} 1" grep -qE '^gpudiag_gpu_backend_info\{backend="none",driver_version=""\} 1$' "$out.metrics"
	check "$n: collectors are exactly: $want" test "$(sed -nE 's/^gpudiag_collector_success\{collector="([a-z]+)"\} .*/\1/p' "$out.metrics" | sort | tr '\n' ' ')" = "$want "
	check "$n: every collector's last sample succeeded" bash -c '! grep -E "^gpudiag_collector_success\{" "$1" | grep -qv " 1$"' _ "$out.metrics"
	check "$n: no failed sample" bash -c '! grep -E "^gpudiag_collector_failures_total\{" "$1" | grep -qv " 0$"' _ "$out.metrics"
	check "$n: logs the no-GPU-backend line" grep -q 'no GPU backend: GPU metrics are off, host collectors keep running' "$out.log"
	check "$n: logs nothing at warn or above" bash -c '! grep -qE "^[^ ]+ (warn|error|dpanic|panic|fatal) |\"level\":\"(warn|error|dpanic|panic|fatal)\"" "$1"' _ "$out.log"
	check "$n: /diagnose serves JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out.diagnose.json"
	case $n in
	default | daemonset) check "$n: runs as uid 0" test "$uid" = 0 ;;
	nonroot | nonroot-all) check "$n: runs as uid 65534" test "$uid" = 65534 ;;
	esac
	if [ "$n" = daemonset ]; then
		# CAP_DAC_READ_SEARCH is bit 2, CAP_SYS_PTRACE bit 19.
		check "$n: holds exactly SYS_PTRACE and DAC_READ_SEARCH" test "$capeff" = 0000000000080004
		check "$n: logs JSON" python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1]) if l.strip()]' "$out.log"
	fi
done

phase "done"
pm images --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -vE '^<none>' || true
echo "wall time: $((SECONDS - start)) s; outputs in $STATE/out"
if [ "$failures" -gt 0 ]; then
	echo "$failures check(s) failed"
	exit 1
fi
echo "all checks passed"
