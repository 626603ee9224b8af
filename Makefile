# leafmq — make run starts a node, make test proves it.
SHELL        := /bin/bash
GO           ?= go
export GOTOOLCHAIN := local
# The version, always SemVer, is decided in one place: scripts/version.sh,
# through scripts/build.sh (used by build, dist and deploy/Dockerfile).
VERSION      ?= $(shell scripts/version.sh)
export VERSION
BIN          := $(CURDIR)/bin
STATICCHECK  := $(BIN)/staticcheck
STATICCHECK_VERSION := v0.8.2
TEST_TIMEOUT ?= 20m
BENCHTIME    ?= 1s

.PHONY: all build dist run test unit lint fmt-check vet staticcheck tidy-check model bench fuzz chaos soak clean

all: build

build:
	./scripts/build.sh $(BIN)

## dist: release archives for linux and darwin, amd64 and arm64, in dist/: leafd-vVERSION-OS-ARCH.tar.gz
## (and leafctl-…) each with the binary, LICENSE and README.md, and dist/SHA256SUMS over them
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST      ?= $(CURDIR)/dist
dist:
	rm -rf $(DIST)
	./scripts/dist.sh $(DIST) $(PLATFORMS)

## run: start leafd with the embedded defaults (NATS on 127.0.0.1:4222, data in ./data)
run: build
	$(BIN)/leafd $(ARGS)

## test: install and start MariaDB, lint, run every test with -race, stop MariaDB
test:
	./scripts/test.sh

## unit: go test -race without real databases (their tests skip)
unit:
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

tidy-check:
	cp go.mod go.sum /tmp/ && $(GO) mod tidy && git diff --exit-code go.mod go.sum; rc=$$?; cp /tmp/go.mod /tmp/go.sum .; exit $$rc

## model: model-check the protocols (model/*.pml, docs/protocol.md) with Spin: every model clean, and each
## planted bug (a guard removed) must give a counterexample
model:
	./scripts/model.sh

## bench: Go benchmarks of the hot paths (ring, engine, responder)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -cpu 2 ./ringbuf/ ./segment/ ./producer/ ./wire/ ./snowflake/

## fuzz: run every fuzz target of the module for FUZZTIME each (default 30s; the release bar is FUZZTIME=10m)
FUZZTIME ?= 30s
fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

## chaos: soak a real cluster (3 nats-server, MariaDB, ZooKeeper, 3 leafd) under every fault of the model for DURATION
DURATION   ?= 3m
CHAOS_ARGS ?=
chaos: build
	$(GO) build -o $(BIN)/leafchaos ./cmd/leafchaos
	$(BIN)/leafchaos --duration $(DURATION) --leafd $(BIN)/leafd --json $(BIN)/chaos-report.json $(CHAOS_ARGS)

## soak: the long chaos soak mixing every fault (DURATION=30m by default; leafchaos --list-faults lists them);
## it fails when availability after a fault's heal misses its goal (--availability-goals). SOAK_RATE
## requests/s (1000: the whole cluster, its databases and the load share one machine, and a load that
## saturates it measures the machine, not leafd; raise it on a bigger one)
SOAK_RATE ?= 1000
soak: build
	$(GO) build -o $(BIN)/leafchaos ./cmd/leafchaos
	$(BIN)/leafchaos --duration $(if $(filter command line,$(origin DURATION)),$(DURATION),30m) --rate $(SOAK_RATE) --availability-goals --leafd $(BIN)/leafd --json $(BIN)/soak-report.json $(CHAOS_ARGS)

## soak-regions: the many-regions mode judged (docs/regions.md, Tested as deployed): 3 regions of 3
## nats-servers and 2 leafds each, each region fault twice (on two regions), --availability-goals; about 4.5 minutes
.PHONY: soak-regions
REGIONS_RATE   ?= 300
REGIONS_FAULTS ?= region-cut,region-kill,region-partition,region-kill,region-partition,region-cut
soak-regions: build
	$(GO) build -o $(BIN)/leafchaos ./cmd/leafchaos
	$(BIN)/leafchaos --regions 3 --servers-per-region 3 --leafds-per-region 2 --rate $(REGIONS_RATE) --faults $(REGIONS_FAULTS) --availability-goals --leafd $(BIN)/leafd --json $(BIN)/soak-regions-report.json $(CHAOS_ARGS)

clean:
	rm -rf $(BIN) $(DIST)
