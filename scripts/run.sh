#!/usr/bin/env bash
# Build and run the gpudiag daemon on this host. Extra arguments are passed to
# the daemon, e.g. scripts/run.sh --web.listen-address=:10910 --log.level=debug
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_packages gcc libc6-dev make git
ensure_go
make build BINARY=.dist/gpudiag >/dev/null
exec .dist/gpudiag "$@"
