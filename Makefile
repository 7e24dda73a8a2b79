# gomhi — build, test, benchmark, run.
GO      ?= go
PKGS    ?= ./...
BIN     := bin/mhictl

.PHONY: all build test vet fmt-check lint bench run clean fuzz

# Native Go fuzz targets, each run briefly by `make test`. The budgets are
# execution counts, not durations: with a duration, Go 1.26's fuzzing
# coordinator can fail a clean run with "context deadline exceeded" at the
# deadline (golang/go#75804). Each takes a few seconds here.
FUZZ_TARGETS := ./mhinet/ntb:FuzzParseNTB:200000 ./mhinet/ntb:FuzzRoundTripNTB:15000 \
	./mhinet/qmap:FuzzParseQMAP:200000 ./mhinet/qmap:FuzzRoundTripQMAP:10000 \
	./mhi/ep:FuzzAnswer:150000 ./sysfs/genl:FuzzDecodeRequest:60000 \
	./mhinet/gso:FuzzSegment:100000 ./pcigeneric/vfiouser:FuzzDecodeMessage:100000 \
	./mhinet/tun:FuzzCoalesce:100000 \
	./mhi/proto/qmi:FuzzParseQMUX:100000 ./mhi/proto/qmi:FuzzTLVs:50000 \
	./mhi/proto/at:FuzzParseLine:100000 ./mhi/ep:FuzzQMIAnswer:50000 ./mhi/ep:FuzzATAnswer:50000

all: build

build:
	$(GO) build -o $(BIN) ./cmd/mhictl

# The README's test command: formatting, vet, and the race-enabled tests.
test: fmt-check vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(MAKE) --no-print-directory fuzz

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest##*:}; \
		echo "fuzz $$name ($$n inputs)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $${n}x -fuzzminimizetime 200x $$pkg || exit 1; \
	done

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt-check vet

# Benchmarks with allocation counts; figures go to docs/PERFORMANCE.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./mhi/...

# The main job on the embedded mock modem.
run:
	$(GO) run ./cmd/mhictl bench --quick

clean:
	rm -rf bin
