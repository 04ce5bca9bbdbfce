#!/usr/bin/env bash
# Known vulnerabilities in the code gpudiag calls: govulncheck over every
# package, with the Go vulnerability database. Fails on any finding.
#
#   bash scripts/vulncheck.sh             # scan with the real database
#   bash scripts/vulncheck.sh --selftest  # prove the gate fails on a finding
#
# --selftest scans against a one-entry database planted in a temporary
# directory (a made-up advisory against go.uber.org/zap, which the daemon
# calls) and passes only if the scan fails and names it.
#
# GOVULNDB picks the database (default https://vuln.go.dev; a mirror, or a
# local copy as file:///path). When the database cannot be reached, the
# script says so and exits 0, or 1 with VULNCHECK_REQUIRED=1: some build
# machines reach only the Go module proxy, from which govulncheck itself
# installs but its database does not come.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_go
GOVULNCHECK_VERSION=v1.1.4
db=${GOVULNDB:-https://vuln.go.dev}

bin="$(go env GOPATH)/bin/govulncheck"
if ! "$bin" -version 2>/dev/null | grep -q "govulncheck@$GOVULNCHECK_VERSION"; then
	go install "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION"
fi

if [ "${1:-}" = --selftest ]; then
	planted=$(mktemp -d)
	trap 'rm -rf "$planted"' EXIT
	mkdir -p "$planted/index" "$planted/ID"
	echo '{"modified":"2026-11-01T00:00:00Z"}' >"$planted/index/db.json"
	echo '[{"path":"go.uber.org/zap","vulns":[{"id":"GO-2099-0001","modified":"2026-11-01T00:00:00Z"}]}]' >"$planted/index/modules.json"
	cat >"$planted/ID/GO-2099-0001.json" <<'OSV'
{"schema_version":"1.3.1","id":"GO-2099-0001","modified":"2026-11-01T00:00:00Z","published":"2026-11-01T00:00:00Z",
 "summary":"Planted advisory (vulncheck self-test)","details":"Not a real vulnerability.",
 "affected":[{"package":{"name":"go.uber.org/zap","ecosystem":"Go"},
  "ranges":[{"type":"SEMVER","events":[{"introduced":"0"}]}],
  "ecosystem_specific":{"imports":[{"path":"go.uber.org/zap","symbols":["New","NewNop"]}]}}],
 "database_specific":{"url":"https://pkg.go.dev/vuln/GO-2099-0001"}}
OSV
	rc=0
	out=$(CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" "$bin" -db "file://$planted" ./... 2>&1) || rc=$?
	# govulncheck exits 3 when it finds a vulnerability the code reaches.
	if [ "$rc" != 3 ] || ! grep -q "GO-2099-0001" <<<"$out"; then
		echo "vulncheck self-test FAILED: want exit 3 naming the planted advisory, got $rc:" >&2
		echo "$out" >&2
		exit 1
	fi
	echo "vulncheck self-test: a planted advisory fails the scan, as it should"
	exit 0
fi

reachable() {
	case $db in
	file://*) [ -d "${db#file://}" ] ;;
	*) curl -fsS -m 10 -o /dev/null "$db/index/db.json" ;;
	esac
}
if ! reachable; then
	echo "vulncheck SKIPPED: the vulnerability database $db is not reachable from this machine;" \
		"set GOVULNDB to a reachable mirror or local copy" >&2
	[ "${VULNCHECK_REQUIRED:-0}" = 1 ] && exit 1
	exit 0
fi
CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" "$bin" -db "$db" ./...
