# sitecon — make demo runs the main job, make test runs the tests.
SHELL := /bin/bash
export CGO_ENABLED := 0

GO       ?= go
BIN      := bin
SITE_DIR ?= .sitebox
# Fuzz targets run for this long each in `make test`.
FUZZTIME ?= 10s

.PHONY: all build dist sitebox controlplane test race fuzz lint bench bench-peers faults chaos demo demo-down crds screenshots clean

all: build

# The version and commit `sitecon version` reports, stamped by the build.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.0.0-g$$(git rev-parse --short HEAD 2>/dev/null || echo unknown))
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The package whose variables the build stamps (-ldflags -X).
VERSION_PKG := github.com/sitecon/sitecon/cmd
export VERSION COMMIT
build:
	$(GO) build -ldflags "-X $(VERSION_PKG).buildVersion=$(VERSION) -X $(VERSION_PKG).buildCommit=$(COMMIT)" -o $(BIN)/sitecon .

# Static binaries for linux/amd64 and linux/arm64, their Debian packages
# (nfpm, built once into the cache) and SHA256SUMS, in dist/. make test
# builds and installs this machine's package (test/dist).
dist:
	packaging/dist.sh dist

# The control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) are built once into a cache outside the clone.
controlplane:
	@test/sitebox/build/build.sh >/dev/null

sitebox: controlplane
	$(GO) build -o $(BIN)/sitebox ./test/sitebox/cmd/sitebox
	$(GO) build -o $(BIN)/k3sstandin ./test/k3sstandin

# golangci-lint, pinned in its own tools module (test/lint), built once into
# a cache outside the clone; .golangci.yml says which linters and why any
# finding is excluded. go mod tidy -diff fails when go.mod or go.sum is not tidy.
# The version is read from test/lint/go.mod: bumping it there builds anew.
GOLANGCI_LINT_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/golangci/golangci-lint/v2" {print $$3}' test/lint/go.mod)
GOLANGCI_LINT := $(HOME)/.cache/sitecon/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	@test -x $(GOLANGCI_LINT) || { echo "building golangci-lint $(GOLANGCI_LINT_VERSION) into $(GOLANGCI_LINT) (once)"; \
	  mkdir -p $(dir $(GOLANGCI_LINT)) && cd test/lint && $(GO) build -o $(GOLANGCI_LINT).partial-$$$$ github.com/golangci/golangci-lint/v2/cmd/golangci-lint && \
	  mv $(GOLANGCI_LINT).partial-$$$$ $(GOLANGCI_LINT); }
	$(GOLANGCI_LINT) run ./...

# Unit tests, fuzzing for a bounded time, the race step and the end-to-end
# tests against a real control plane, in parallel streams (test/suite.sh):
# the e2e package in E2E_SHARDS shards, each with its own site, beside the
# rest. It ends with one report: every failure's output, each package's
# time and the 20 slowest tests (test/testtimes).
E2E_SHARDS ?= 3
test: lint controlplane
	GO=$(GO) E2E_SHARDS=$(E2E_SHARDS) FUZZTIME=$(FUZZTIME) RACE_PKGS="$(RACE_PKGS)" FUZZ_TARGETS="$(FUZZ_TARGETS)" test/suite.sh

# The packages whose code runs goroutines (kubectl's drain helper calls
# back from its evictions' goroutines; the agent's reconcilers, the local
# API, the console's task runner, the CLI) and whose tests need no e2e site, under
# the race detector. It needs cgo (gcc): everything else builds without.
RACE_PKGS := ./cmd/ ./agent/ ./agent/apps/ ./agent/applogs/ ./agent/drainrequest/ ./agent/localapi/ ./agent/vncbridge/ ./agent/workloads/ ./audit/ ./kube/flow/ ./ui/ ./views/
race: controlplane
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)

# Each fuzz target runs for FUZZTIME from its checked-in corpus (agent/testdata/fuzz).
FUZZ_TARGETS := FuzzParseAndValidateConfig FuzzDecodeBundle
# One line per target when it passes; its whole output when it does not (a
# crasher is saved under agent/testdata/fuzz and named there).
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  out=$$($(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./agent/ 2>&1); rc=$$?; \
	  if [ $$rc -ne 0 ]; then echo "$$out" | tail -60; echo "fuzz $$t failed"; exit 1; fi; \
	  echo "$$out" | tail -1; \
	done

# The fault scenarios, each printing its time to recovery: a node lost at
# shipped timings, a whole-site power cut and two of three servers off.
FAULT_TESTS := TestControlPlaneFaultsWhileConsoleAndAgentsRun|TestChurnLeavesNoGrowth|TestNodeLossAtShippedTimings|TestLinkBlinkAtShippedTimingsMovesNothing|TestSitePowerCutComesBack|TestSiteboxBootstrapModeComesBackAfterAPowerCut|TestPowerCutMembersStartWithoutTheSeed|TestRemovedServerHoldsAfterRestart|TestNodeLostTwiceAtShippedTimings|TestTwoNodesLostAtShippedTimings
# A node lost at the timings a real site has (the controller-manager
# settings the agent renders for k3s, the agents' shipped defaults,
# two-minute rebuilds, VMs that boot): slow, so not part
# of make test; it logs when each step happened.
# BenchmarkFailoverAtShippedTimings then loses a node five times, each on a
# fresh site, and reports the p50 and max failover of a container and a VM.
faults: controlplane
	$(GO) test -tags faults -count=1 -v -timeout 75m -run '^($(FAULT_TESTS))$$' -bench '^BenchmarkFailoverAtShippedTimings$$' -benchtime 1x ./test/e2e/

# The fault explorer (issue 36): CHAOS_RUNS random schedules of cuts,
# one-way loss, pauses, power cuts and agent restarts, with drains,
# uncordons and migrations among them, on one bootstrap-mode site with the
# runtime simulator, the six invariants of README's "What sitecon
# guarantees" checked all along from outside the product. CHAOS_SEED
# replays a schedule (with CHAOS_RUNS=1); a failure prints its seed and the
# shortest schedule that still fails. Ends with the table docs/BENCHMARKS.md
# holds. make test runs one fixed short schedule (TestChaosShortSchedule);
# make chaos also runs the fixed schedules of node remove and leave where
# they are most dangerous (TestChaosLeaveAndRemove, ~6 min) and of an app
# without a volume on a paused host or kubelet
# (TestChaosAppWithoutVolumeOnAPausedHost, ~4 min), and checks that a
# staged clock step reaches the node (TestChaosClockStepReachesTheNode).
# Clock steps need sitecon and the k3s stand-in built again with sitebox's
# clock overlay (test/sitebox/clockstep; ~3 min the first time, cached
# after); CHAOS_CLOCKS=0 leaves them out of the schedules.
CHAOS_RUNS ?= 20
chaos: controlplane
	@echo "machine: $$(nproc) cores, $$(free -g | awk '/^Mem:/ {print $$2}') GiB; $$(date -u '+%Y-%m-%d %H:%M UTC'); load $$(cut -d' ' -f1-3 /proc/loadavg)"
	CHAOS_RUNS=$(CHAOS_RUNS) $(GO) test -tags chaos -count=1 -v -timeout 180m -run '^(TestChaosExplore|TestChaosLeaveAndRemove|TestChaosAppWithoutVolumeOnAPausedHost|TestChaosClockStepReachesTheNode)$$' ./test/e2e/

bench: controlplane
	$(GO) test -run '^$$' -bench . -benchmem ./...

# sitecon against its peers in one run (docs/BENCHMARKS.md): the console
# beside k9s (pinned in its own tools module, test/peers/tools, built once
# into a cache outside the clone), the agent beside a reference that polls
# as EVE's zedkube does, on sitebox sites of each scale
# (SITECON_PEER_SCALES, NODESxPODSxVOLUMES,...); then the console's frame
# cost. Minutes long and needs tmux: not part of make test or make bench.
K9S_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/derailed/k9s" {print $$3}' test/peers/tools/go.mod)
K9S := $(HOME)/.cache/sitecon/tools/k9s-$(K9S_VERSION)
bench-peers: controlplane
	@command -v tmux >/dev/null || { echo "make bench-peers needs tmux: apt-get install tmux"; exit 1; }
	@test -x $(K9S) || { echo "building k9s $(K9S_VERSION) into $(K9S) (once)"; \
	  mkdir -p $(dir $(K9S)) && cd test/peers/tools && $(GO) build -ldflags "-s -w -X github.com/derailed/k9s/cmd.version=$(K9S_VERSION)" -o $(K9S).partial-$$$$ github.com/derailed/k9s && \
	  mv $(K9S).partial-$$$$ $(K9S); }
	@echo "machine: $$(nproc) cores, $$(free -g | awk '/^Mem:/ {print $$2}') GiB; $$(date -u '+%Y-%m-%d %H:%M UTC'); load $$(cut -d' ' -f1-3 /proc/loadavg)"
	SITECON_K9S=$(K9S) $(GO) test -tags peers -count=1 -v -timeout 90m -run '^$$' -bench '^BenchmarkPeers' -benchtime 1x ./test/e2e/
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkFramePath' -benchmem ./views/

# The demo: a three-node site with the simulators and a demo site, then the
# console on it. q (or Ctrl-C) stops everything it started.
demo: build sitebox
	@$(BIN)/sitebox down --dir $(SITE_DIR) 2>/dev/null || true
	@# One shell, the trap first: Ctrl-C at any point (the site starting, or
	@# the console) stops everything the demo started.
	@trap '$(BIN)/sitebox down --dir $(SITE_DIR) >/dev/null 2>&1' EXIT; \
	  $(BIN)/sitebox up --demo --agents $(BIN)/sitecon --nodes 3 --dir $(SITE_DIR) && \
	  $(BIN)/sitecon --kubeconfig $(SITE_DIR)/kubeconfig --agent-socket $(SITE_DIR)/run/agent-node-a.sock --config $(SITE_DIR)/config/node-a.json --log-file $(SITE_DIR)/logs/console.log \
	    --hint "In another terminal: $(BIN)/sitebox fail node-b --dir $(SITE_DIR)   (and: recover node-b)"

# PNGs of the console's real frames (the golden-frame path, in colour) for
# the README, through charmbracelet/freeze (built once into the cache) and
# rsvg-convert (Debian's librsvg2-bin). freeze sometimes reads no output,
# or only part of it, from the command it runs in its pty: each frame gets
# three tries, and a PNG shorter than its frame's lines is a failed try.
FREEZE   := $(HOME)/.cache/sitecon/tools/freeze-v0.2.2
MONOFONT := /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf
screenshots:
	@command -v rsvg-convert >/dev/null || { echo "make screenshots needs rsvg-convert: apt-get install librsvg2-bin"; exit 1; }
	@test -x $(FREEZE) || (cd test/screenshots/tools && $(GO) build -o $(FREEZE) github.com/charmbracelet/freeze)
	@frames=$$(mktemp -d); trap 'rm -rf $$frames' EXIT; \
	  SITECON_SCREENSHOT_DIR=$$frames $(GO) test -count=1 -run '^TestWriteScreenshotFrames$$' ./views >/dev/null && \
	  mkdir -p screenshots && for f in $$frames/*.ansi; do \
	    name=$$(basename $$f .ansi); \
	    font=""; test -f $(MONOFONT) && font="--font.file $(MONOFONT) --font.family DejaVuSansMono"; \
	    lines=$$(wc -l < $$f); ok=""; for try in 1 2 3; do \
	      if $(FREEZE) -x "cat $$f" -o screenshots/$$name.png --window $$font </dev/null >/dev/null 2>&1; then \
	        height=$$(od -An -tu1 -j20 -N4 screenshots/$$name.png | awk '{print $$1*16777216+$$2*65536+$$3*256+$$4}'); \
	        if [ "$$height" -ge $$((lines * 50)) ]; then ok=1; break; fi; \
	        echo "freeze drew $$name short ($$height px for $$lines lines); again"; \
	      fi; \
	    done; test -n "$$ok" || { echo "freeze failed on $$name (or drew it short: PNG height, read from its IHDR, under 50 px a line)"; exit 1; }; \
	    echo "screenshots/$$name.png"; \
	  done

demo-down:
	$(BIN)/sitebox down --dir $(SITE_DIR)

# Regenerate the Longhorn CRDs from the pinned longhorn-manager module, and
# Multus's NetworkAttachmentDefinition CRD from the pinned
# network-attachment-definition-client module (not a dependency: fetched
# by version).
NAD_CLIENT = github.com/k8snetworkplumbingwg/network-attachment-definition-client@v1.7.7
crds:
	@dir=$$($(GO) list -m -f '{{.Dir}}' github.com/longhorn/longhorn-manager 2>/dev/null || $(GO) mod download -json github.com/longhorn/longhorn-manager@v1.10.0 | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'); \
	{ echo "# Longhorn v1.10.0 CRDs: github.com/longhorn/longhorn-manager@v1.10.0 k8s/crds.yaml (Apache-2.0)"; \
	  echo "# with the Helm label includes dropped. Regenerate with 'make crds'."; \
	  grep -v '{{- include "longhorn.labels"' $$dir/k8s/crds.yaml; } > test/sitebox/crds/longhorn.yaml
	@dir=$$($(GO) mod download -json $(NAD_CLIENT) | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'); \
	{ echo "# Multus NetworkAttachmentDefinition CRD (k8s.cni.cncf.io/v1): $(NAD_CLIENT)"; \
	  echo "# artifacts/networks-crd.yaml (Apache-2.0). Regenerate with 'make crds'."; \
	  cat $$dir/artifacts/networks-crd.yaml; } > test/sitebox/crds/multus.yaml

clean:
	rm -rf $(BIN)
