# distflow — top-level entry points (the README's contract).
#   make demo   install what is missing, build, run the embedded default end to end
#               (ALGO=<name> picks examples/demo/<name>.yaml for the RL step, default grpo;
#                DEMO_SFT=<dir> reuses the data and SFT model of an earlier run's output dir)
#   make test   install what is missing, build, run the test suite
#   make bench  build and run the benchmarks
#   make test-variants  the suite with oneDNN restricted to AVX2 / AVX512_CORE, with our kernels
#               forced to each lower variant (DF_CPU_VARIANT) and with the other DF_NATIVE
#               setting (scripts/test-variants.sh, docs/testing.md)
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
ALGO  ?= grpo
DEMO_SFT ?=

.PHONY: all deps build test test-variants demo bench clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 1

test-variants: deps
	@bash scripts/test-variants.sh $(BUILD)

demo: build
	@DEMO_SFT="$(DEMO_SFT)" bash scripts/demo.sh $(BUILD)/distflow $(ALGO)

bench: build
	@bash scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD)-alt
