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

# ensure_go puts a Go toolchain at least as new as go.mod's on PATH. Debian's
# golang-go is older, so when no recent Go is installed it is used only to
# fetch the exact toolchain from the Go module proxy (golang.org/toolchain).
ensure_go() {
	local root want have
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	want="$(awk '$1 == "go" {print $2}' "$root/go.mod")"
	[ -x /usr/local/go/bin/go ] && PATH="/usr/local/go/bin:$PATH"
	[ -d "$HOME/go/bin" ] && PATH="$PATH:$HOME/go/bin"
	export PATH
	if command -v go >/dev/null 2>&1; then
		have="$(go env GOVERSION 2>/dev/null | sed 's/^go//')"
		if [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" = "$want" ]; then
			return 0
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
	dir="$(cd /tmp && GOFLAGS=-mod=mod /usr/bin/go mod download -json "$mod" | awk -F'"' '$2 == "Dir" {print $4}')"
	[ -x "$dir/bin/go" ] || { echo "could not fetch Go $want" >&2; return 1; }
	PATH="$dir/bin:$PATH"
	export PATH
}

# go-nvml's header marks NVML calls deprecated that gpudiag never makes; the
# warnings would bury real ones.
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
