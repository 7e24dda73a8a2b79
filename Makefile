# gomhi — build, test, benchmark, run.
GO      ?= go
PKGS    ?= ./...
BIN     := bin/mhictl

.PHONY: all build test vet fmt-check lint bench run clean fuzz

# Native Go fuzz targets, each run briefly by `make test` (FUZZTIME each).
FUZZTIME ?= 4s
FUZZ_TARGETS := ./mhinet/ntb:FuzzParseNTB ./mhinet/ntb:FuzzRoundTripNTB \
	./mhinet/qmap:FuzzParseQMAP ./mhinet/qmap:FuzzRoundTripQMAP ./mhi/ep:FuzzAnswer \
	./sysfs/genl:FuzzDecodeRequest

all: build

build:
	$(GO) build -o $(BIN) ./cmd/mhictl

# The README's test command: formatting, vet, and the race-enabled tests.
test: fmt-check vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(MAKE) --no-print-directory fuzz

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg || exit 1; \
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
