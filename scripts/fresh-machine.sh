#!/usr/bin/env bash
# The README's promise, checked: on a machine with no Go, no module or build
# cache and an empty HOME, its two commands set everything up. A private mount
# namespace hides every installed Go toolchain and Go cache (tmpfs over
# /usr/local/go, ~/go, ~/sdk, ~/.cache, ~/.config), and both scripts run under
# `env -i` with a plain PATH: `scripts/test.sh --setup-only` (everything the
# test command installs and downloads, without running the suite) and
# `scripts/run.sh`, which must end with the daemon serving /metrics.
#
# What is not hidden: Debian packages. A Debian golang-go (1.19, too old to
# build gpudiag) is what the scripts install themselves to fetch the toolchain
# on a fresh machine. The module proxy and its checksum database are reached
# over the network as a fresh machine would (GOPROXY and friends are passed
# through when set). Needs root (or CAP_SYS_ADMIN) for the mount namespace.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${GPUDIAG_FRESH_NAMESPACE:-}" ]; then
	if ! unshare --mount --propagation private true 2>/dev/null; then
		echo "fresh-machine: cannot create a mount namespace (needs root or CAP_SYS_ADMIN)" >&2
		exit 1
	fi
	exec unshare --mount --propagation private env GPUDIAG_FRESH_NAMESPACE=1 bash "$0" "$@"
fi

home="${HOME:-/root}"
for dir in /usr/local/go "$home/go" "$home/sdk" "$home/.cache" "$home/.config"; do
	[ -d "$dir" ] && mount -t tmpfs -o mode=0755 gpudiag-fresh "$dir"
done

# Only what a login shell on a fresh machine would have, and the proxy settings.
fresh_env=(env -i HOME="$home" USER="$(id -un)" LANG=C.UTF-8 TERM=dumb
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
for var in GOPROXY GOSUMDB GONOSUMDB GOPRIVATE GOINSECURE http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
	[ -n "${!var:-}" ] && fresh_env+=("$var=${!var}")
done

if "${fresh_env[@]}" bash -c 'command -v go' >/dev/null 2>&1; then
	echo "fresh-machine: note: $("${fresh_env[@]}" bash -c 'go version') is installed as a Debian package and stays visible" >&2
fi

start=$(date +%s)
echo "fresh-machine: scripts/test.sh --setup-only"
"${fresh_env[@]}" bash scripts/test.sh --setup-only

echo "fresh-machine: scripts/run.sh"
port=$((20000 + RANDOM % 20000))
log="$(mktemp)"
"${fresh_env[@]}" setsid bash scripts/run.sh --web.listen-address="127.0.0.1:$port" >"$log" 2>&1 &
runner=$!
stop() { kill -- -"$runner" 2>/dev/null || true; wait "$runner" 2>/dev/null || true; rm -f "$log"; }
trap stop EXIT

# The daemon is built cold first (no build cache): allow minutes.
deadline=$(($(date +%s) + 900))
metrics=""
while [ "$(date +%s)" -lt "$deadline" ]; do
	if ! kill -0 "$runner" 2>/dev/null; then
		echo "fresh-machine: scripts/run.sh exited before serving:" >&2
		cat "$log" >&2
		exit 1
	fi
	if metrics="$(curl -fsS --max-time 5 "http://127.0.0.1:$port/metrics" 2>/dev/null)" && grep -q '^gpudiag_build_info' <<<"$metrics"; then
		break
	fi
	metrics=""
	sleep 1
done
if [ -z "$metrics" ]; then
	echo "fresh-machine: no /metrics from the daemon within 15 minutes:" >&2
	cat "$log" >&2
	exit 1
fi
grep '^gpudiag_build_info' <<<"$metrics"
grep '^gpudiag_gpu_backend_info' <<<"$metrics" || true
echo "fresh-machine: ok: both README commands set up from nothing; the daemon served /metrics ($(($(date +%s) - start)) s)"
