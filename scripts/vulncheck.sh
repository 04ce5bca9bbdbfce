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
# local copy as file:///path). Build machines that reach only the Go module
# proxy cannot ask vuln.go.dev, but the proxy serves the database's source,
# golang.org/x/vulndb, whose data/osv holds every published advisory; the
# script then builds the same v1 database from the newest snapshot with that
# module's own indexdb command and scans against it, naming the snapshot's
# date. With no database at all the scan fails: a gate that skips is no gate.
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

# snapshot_db builds a v1 database from golang.org/x/vulndb at the proxy's
# newest version into $1 and prints that version.
snapshot_db() {
	local out=$1 info dir version
	info=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json golang.org/x/vulndb@latest) || return 1
	dir=$(awk -F'"' '$2 == "Dir" {print $4}' <<<"$info")
	version=$(awk -F'"' '$2 == "Version" {print $4}' <<<"$info")
	[ -d "$dir/data/osv" ] || return 1
	(cd /tmp && GOFLAGS=-mod=mod go run "golang.org/x/vulndb/cmd/indexdb@$version" \
		-vulns "$dir/data/osv" -out "$out") >&2 || return 1
	echo "$version"
}

if ! reachable; then
	if [ -n "${GOVULNDB:-}" ]; then
		echo "vulncheck FAILED: the vulnerability database $db is not reachable" >&2
		exit 1
	fi
	local_db=$(mktemp -d)
	trap 'rm -rf "$local_db"' EXIT
	echo "vulncheck: $db is not reachable; building the database from golang.org/x/vulndb on the module proxy" >&2
	if ! version=$(snapshot_db "$local_db/db"); then
		echo "vulncheck FAILED: neither $db nor golang.org/x/vulndb on the module proxy could be reached;" \
			"set GOVULNDB to a reachable mirror or local copy" >&2
		exit 1
	fi
	# A pseudo-version ends in the commit's UTC time: yyyymmddhhmmss.
	stamp=$(sed -E 's/.*-([0-9]{14})-[0-9a-f]+$/\1/' <<<"$version")
	echo "vulncheck: database golang.org/x/vulndb@$version (advisories to ${stamp:0:4}-${stamp:4:2}-${stamp:6:2}," \
		"$(find "$local_db/db/ID" -name '*.json' | wc -l) entries)" >&2
	db="file://$local_db/db"
fi
CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" "$bin" -db "$db" ./...
