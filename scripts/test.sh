#!/usr/bin/env bash
# Install what the tests need and run them: gofmt, go vet, the race-enabled
# unit and integration tests (promtool, and for e2e/ a real Prometheus and
# Alertmanager). --setup-only installs and downloads everything and stops
# there (scripts/fresh-machine.sh uses it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_packages gcc libc6-dev make git curl prometheus prometheus-alertmanager chromium
ensure_go
go version
go mod download
# go test ./deploy renders the manifests with helm (built once per test
# binary by `go install`, deploy/helm_test.go) and kustomize (`go run`,
# deploy/render_test.go); a test checks the versions here are theirs. Building them here, outside the
# tests' timeouts and while no other package's tests compete for the CPUs,
# fills the module and build caches the tests' go run reads.
tools_bin="$(mktemp -d)"
GOFLAGS=-mod=mod GOWORK=off GOBIN="$tools_bin" go install helm.sh/helm/v3/cmd/helm@v3.19.0
GOFLAGS=-mod=mod GOWORK=off GOBIN="$tools_bin" go install sigs.k8s.io/kustomize/kustomize/v5@v5.8.2
rm -rf "$tools_bin"
if [ "${1:-}" = "--setup-only" ]; then
	exit 0
fi
make test
# The soak test (two hours of a real trace, looped) is skipped under -race,
# which makes it ~10x slower; it runs here without the race detector.
go test -count=1 -run '^TestSoakReplayLoop$' ./cmd/exporter
# Every fuzz target for FUZZTIME (scripts/fuzz.sh). Measured when there were
# 19 targets, at 3s each on 2 CPUs shared with other builds: 97-110 s with the
# instrumented build cached, 187-304 s cold (the build instruments every
# package, std included).
make fuzz FUZZTIME="${FUZZTIME:-3s}"
# Known vulnerabilities: the gate is proven to bite on a planted advisory,
# then the real database is asked; with no database the gate fails.
bash scripts/vulncheck.sh --selftest
bash scripts/vulncheck.sh
