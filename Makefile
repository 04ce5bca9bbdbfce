# Build and test entry points. `make build` is what the Dockerfile and the
# validation runs use; `make test` is what CI runs (see .ci/run).
GO        ?= go
BINARY    ?= gpudiag
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
BUILD_USER ?= $(shell echo "$$(id -un 2>/dev/null || echo unknown)@$$(hostname 2>/dev/null || cat /etc/hostname 2>/dev/null || echo unknown)")
# The format Prometheus' own builds use; SOURCE_DATE_EPOCH pins it for
# reproducible builds.
BUILD_DATE ?= $(shell date -u $${SOURCE_DATE_EPOCH:+-d @$$SOURCE_DATE_EPOCH} +%Y%m%d-%H:%M:%S)
VERSION_PKG := github.com/prometheus/common/version
LDFLAGS   := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION) -X $(VERSION_PKG).Branch=$(BRANCH) \
	-X '$(VERSION_PKG).BuildUser=$(BUILD_USER)' -X $(VERSION_PKG).BuildDate=$(BUILD_DATE)

# go-nvml's header marks some NVML calls deprecated; we do not call them, and
# the warnings would bury real ones.
export CGO_ENABLED := 1
export CGO_CFLAGS  ?= -O2 -g -Wno-deprecated-declarations

.PHONY: build test vet lint-metrics bench fuzz fresh-check
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BINARY) ./cmd/exporter

vet:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

test: vet
	$(GO) test -race -count=1 -timeout 30m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Every fuzz target for FUZZTIME each: see scripts/fuzz.sh.
FUZZTIME ?= 10s
fuzz:
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

# The README's two commands on a simulated fresh machine: see scripts/fresh-machine.sh.
fresh-check:
	bash scripts/fresh-machine.sh
