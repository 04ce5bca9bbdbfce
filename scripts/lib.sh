# Shared set-up for scripts/run.sh, scripts/test.sh and .ci/run: make sure the
# Go toolchain that go.mod names, a C compiler (cgo, for NVML and DCGM) and the
# Debian packages passed in are installed. Sourced, not run.

apt_updated=""
ensure_packages() {
	local missing=()
	for pkg in "$@"; do
		dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	local sudo=""
	[ "$(id -u)" -ne 0 ] && sudo="sudo"
	if [ -z "$apt_updated" ]; then
		$sudo apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ensure_go puts a Go toolchain at least as new as go.mod's on PATH.
#  - An installed Go at least that new is used as it is.
#  - An installed Go 1.21 or newer but older than go.mod's switches itself:
#    GOTOOLCHAIN names the exact release, which the go command fetches from the
#    module proxy into its module cache, checks against the checksum database
#    and makes executable. The environment variable overrides a go.env that
#    says GOTOOLCHAIN=local.
#  - With no Go, or one too old to switch (Debian bookworm's golang-go is
#    1.19), that old Go only fetches the toolchain module; files in the module
#    cache carry no execute bits, so they are set here, as the go command's own
#    switch does.
ensure_go() {
	local root want have
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	want="$(awk '$1 == "go" {print $2}' "$root/go.mod")"
	[ -x /usr/local/go/bin/go ] && PATH="/usr/local/go/bin:$PATH"
	[ -d "$HOME/go/bin" ] && PATH="$PATH:$HOME/go/bin"
	export PATH
	if command -v go >/dev/null 2>&1; then
		have="$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null | sed 's/^go//')"
		if [ -n "$have" ] && version_at_least "$have" "$want"; then
			return 0
		fi
		if [ -n "$have" ] && version_at_least "$have" 1.21; then
			export GOTOOLCHAIN="go${want}"
			if [ "$(go env GOVERSION 2>/dev/null)" = "go${want}" ]; then
				return 0
			fi
			echo "Go $have could not switch to Go $want; fetching it by hand" >&2
			unset GOTOOLCHAIN
		fi
	fi
	ensure_packages golang-go ca-certificates git
	local arch
	case "$(uname -m)" in
	x86_64) arch=amd64 ;;
	aarch64) arch=arm64 ;;
	*) echo "unsupported architecture $(uname -m)" >&2; return 1 ;;
	esac
	local mod="golang.org/toolchain@v0.0.1-go${want}.linux-${arch}"
	local dir
	dir="$(cd /tmp && GOTOOLCHAIN=local GOFLAGS=-mod=mod /usr/bin/go mod download -json "$mod" | awk -F'"' '$2 == "Dir" {print $4}')"
	[ -n "$dir" ] && [ -f "$dir/bin/go" ] || { echo "could not fetch Go $want ($mod) from the module proxy" >&2; return 1; }
	chmod a+x "$dir"/bin/* "$dir"/pkg/tool/*/*
	PATH="$dir/bin:$PATH"
	export PATH
	export GOTOOLCHAIN=local
	[ "$(go env GOVERSION)" = "go${want}" ] || { echo "Go $want at $dir does not run" >&2; return 1; }
}

# version_at_least A B: whether Go version A (1.26.11, 1.21rc1) is B or newer.
version_at_least() {
	[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}

# go-nvml's header marks NVML calls deprecated that gpudiag never makes; the
# warnings would bury real ones.
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
