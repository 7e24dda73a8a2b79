# gomhi — build, test, benchmark, run.
GO      ?= go
PKGS    ?= ./...
BIN     := bin/mhictl

.PHONY: all build test host-deps test-deps vet fmt-check lint bench run clean fuzz fuzz-long man deploy-files soak

# Native Go fuzz targets, each run briefly by `make test`. The budgets are
# execution counts, not durations: with a duration, Go 1.26's fuzzing
# coordinator can fail a clean run with "context deadline exceeded" at the
# deadline (golang/go#75804). Each takes a few seconds here.
FUZZ_TARGETS := ./mhi/proto/ntb:FuzzParseNTB:200000 ./mhi/proto/ntb:FuzzRoundTripNTB:15000 \
	./mhi/proto/qmap:FuzzParseQMAP:200000 ./mhi/proto/qmap:FuzzRoundTripQMAP:10000 \
	./mhi/ep:FuzzAnswer:150000 ./sysfs/genl:FuzzDecodeRequest:60000 \
	./mhinet/gso:FuzzSegment:100000 ./pcigeneric/vfiouser/protocol:FuzzDecodeMessage:100000 \
	./mhinet/tun:FuzzCoalesce:100000 ./mhi:FuzzEventRing:100000
# MBIM control messages: the codec and the mock modem's answerer.
FUZZ_TARGETS += ./mhi/proto/mbim:FuzzParseMessage:200000 ./mhi/proto/mbim:FuzzInformationBuffer:50000 \
	./mhi/proto/mbim:FuzzReassemble:50000 ./mhi/ep/modem:FuzzMBIMAnswer:50000
# QMI and AT: the codecs and the mock modem's answerers.
FUZZ_TARGETS += ./mhi/proto/qmi:FuzzParseQMUX:100000 ./mhi/proto/qmi:FuzzTLVs:50000 \
	./mhi/proto/at:FuzzParseLine:100000 ./mhi/ep/modem:FuzzQMIAnswer:50000 ./mhi/ep/modem:FuzzATAnswer:50000
# The untrusted message paths (docs/RELIABILITY.md, "Fuzzing").
FUZZ_TARGETS += ./pcigeneric/vfiouser:FuzzServe:10000 ./pcigeneric/vfiouser/client:FuzzClient:12000 \
	./sysfs/genl:FuzzServeRequest:20000 ./sysfs/genl:FuzzClientReply:10000 \
	./sysfs/fusefs:FuzzWrite:30000
# The host's session clients on what the modem sends (MBIM, QMI, WDS settings).
FUZZ_TARGETS += ./mhi/ctrlport:FuzzSessionReceive:50000
# The mock modem's uplink checksum offload on what a host's QMAP header asks.
FUZZ_TARGETS += ./mhi/ep/ipdata:FuzzComputeTransportChecksum:100000
# Transcripts ('mhictl transcript diff' reads files it is given).
FUZZ_TARGETS += ./mhi/ep/transcript:FuzzRead:50000

# `make fuzz-long` runs every target of FUZZ_TARGETS for FUZZTIME each, one
# after the other, and appends one line per target (duration, execs,
# execs/s, new interesting inputs, result) to FUZZ_LOG, for the table in
# docs/RELIABILITY.md; see .ci/fuzz-long.sh for how a crash and Go's
# spurious "context deadline exceeded" (golang/go#75804) are reported.
FUZZTIME ?= 1h
FUZZMINIMIZETIME ?= 10s
FUZZ_LOG ?= fuzz-long.log

all: build

build:
	$(GO) build -o $(BIN) ./cmd/mhictl

# The README's test command: the Debian packages the tests need
# (host-deps: installed as root, else it stops and prints the command),
# formatting, vet, what the real-kernel tests need, and the race-enabled
# tests. It runs with CI=true unless told otherwise: a missing requirement
# fails the test that needs it, and .ci/gotest (which prints what plain go
# test prints, then the tests that skipped and why) fails the run on any
# skip (docs/RELIABILITY.md). `make test CI=false` lets tests skip, each
# saying what it needs. Never -short here: it runs everything.
# TESTFLAGS=-v prints every test's output.
#
# The ModemManager and Linux-driver tests (GUEST_PKGS) boot QEMU guests
# under software emulation: they run after the other packages, alone, so
# that no other package's tests share the two cores with an emulated
# guest. Starved of CPU, the guest's kernel can take seconds to remove a
# crashed modem's ports, and ModemManager 1.20.4 re-creates a modem 2 s
# after its QMI port hangs up, whatever ports it has by then
# (docs/MODEMMANAGER.md, "ModemManager's reprobe race").
GUEST_PKGS ?= ./pcigeneric/vfiouser
test: export CI ?= true
test: host-deps fmt-check vet test-deps
	@all="$$($(GO) list $(PKGS))" && guest="$$($(GO) list $(GUEST_PKGS))" && \
	rest="$$(echo "$$all" | grep -v -x -F -e "$$guest" || true)" && \
	guest="$$(echo "$$all" | grep -x -F -e "$$guest" || true)" && rc=0 && \
	if [ -n "$$rest" ]; then echo "$(GO) run ./.ci/gotest -race -count=1 -timeout 25m $(TESTFLAGS) (all but $(GUEST_PKGS))"; \
		$(GO) run ./.ci/gotest -race -count=1 -timeout 25m $(TESTFLAGS) $$rest || rc=1; fi && \
	if [ -n "$$guest" ]; then echo "$(GO) run ./.ci/gotest -race -count=1 -timeout 25m $(TESTFLAGS)" $$guest; \
		$(GO) run ./.ci/gotest -race -count=1 -timeout 25m $(TESTFLAGS) $$guest || rc=1; fi && \
	exit $$rc
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory soak

# The soak (docs/RELIABILITY.md, "Soak"): traffic and faults through the
# whole stack for SOAK_DURATION, every packet accounted for, resources
# flat, no channel stuck. A normal build: at full rate the minute covers
# about a hundred phases, and the race detector's shadow memory would blur
# the RSS curve (the soak package's own tests run under -race).
SOAK_DURATION ?= 1m
SOAK_FLAGS ?=
soak:
	$(GO) build -o bin/mhictl-soak ./cmd/mhictl
	./bin/mhictl-soak soak --duration $(SOAK_DURATION) $(SOAK_FLAGS)

# The Debian packages of .ci/host-packages (.ci/host-deps.sh): as root with
# apt-get, installs the missing ones; otherwise prints the command that
# does and, under CI=true, stops.
host-deps:
	@bash .ci/host-deps.sh

# QEMU 11.1, the guest kernel and a static busybox for the VFIO and
# Linux-driver tests, unpacked from Debian packages without root into
# /var/cache/gomhi (root) or ~/.cache/gomhi; cached, under a second when
# present (internal/labvm/setup/test-deps.sh).
test-deps:
	@bash internal/labvm/setup/test-deps.sh

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest##*:}; \
		echo "fuzz $$name ($$n inputs)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $${n}x -fuzzminimizetime 200x $$pkg || exit 1; \
	done

fuzz-long:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) bash .ci/fuzz-long.sh $(FUZZ_LOG) $(FUZZ_TARGETS)

vet:
	$(GO) vet $(PKGS) ./.ci/gotest

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt-check vet

# Benchmarks with allocation counts; figures go to docs/PERFORMANCE.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./mhi/...

# The manual pages, one per command, generated from the commands' own help
# (cobra/doc) into docs/man, which is checked in: TestManPagesCurrent
# fails when they are stale. View one with `man -l docs/man/mhictl-up.1`.
man:
	rm -f docs/man/*.1
	$(GO) run ./cmd/mhictl gen-man docs/man

# The generated deployment files: the udev rule from the device table
# (TestUdevRuleCurrent fails when deploy/udev/70-gomhi.rules is stale).
deploy-files:
	$(GO) run ./cmd/mhictl deploy udev-rule > deploy/udev/70-gomhi.rules

# The main job on the embedded mock modem.
run:
	$(GO) run ./cmd/mhictl bench --quick

clean:
	rm -rf bin
