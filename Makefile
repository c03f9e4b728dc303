# distflow — top-level entry points (the README's contract).
#   make demo   install what is missing, build, run the embedded default end to end
#               (ALGO=<name> picks examples/demo/<name>.yaml for the RL step, default grpo;
#                DEMO_SFT=<dir> reuses the data and SFT model of an earlier run's output dir)
#   make test   install what is missing, build, run the test suite, then again under the
#               variants that change float rounding (scripts/test-variants.sh)
#   make bench  install PyTorch + OpenBLAS (the baseline) too, build, run the engine beside PyTorch
#               row by row (scripts/bench.sh, docs/performance.md; BENCH_QUICK=1: the demo shape only)
#   make test-variants  only the variants: the suite with oneDNN restricted to AVX2 / AVX512_CORE, with our kernels
#               forced to each lower variant (DF_CPU_VARIANT) and with the other DF_NATIVE
#               setting (scripts/test-variants.sh, docs/testing.md)
#   make mutate  mutation testing: the suite against each deliberate bug of scripts/mutations.txt
#               (scripts/mutate.sh; ARGS="-f REGEX -j N -c" as needed)
#   make check-fresh  install-deps + build + test in a fresh debootstrapped Debian 12 root, as root
#               (scripts/check-fresh.sh; ARGS="--demo --user --keep --refresh" as needed)
#   make fuzz   build the libFuzzer targets of tests/fuzz with clang (build-fuzz/) and run each
#               for FUZZ_SECONDS (scripts/fuzz.sh; ARGS="workflow safetensors" picks targets)
#   make test-asan  the whole suite built with ASan + UBSan (build-asan/), leaks included
#               (scripts/test-asan.sh; ARGS="-R REGEX" passes ctest options)
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
ALGO  ?= grpo
DEMO_SFT ?=
ARGS ?=
# ON: -march=native for this machine only; OFF: runs on any x86-64, kernels picked at run time
DF_NATIVE ?= OFF
# seconds per fuzz target for make fuzz
FUZZ_SECONDS ?= 60
# cmake --build runs make underneath: no Entering/Leaving directory lines
MAKEFLAGS += --no-print-directory

.PHONY: all deps build test test-variants demo bench mutate check-fresh fuzz test-asan clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DDF_NATIVE=$(DF_NATIVE) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@bash scripts/test-variants.sh $(BUILD)

test-variants: deps
	@bash scripts/test-variants.sh $(BUILD)

demo: build
	@DEMO_SFT="$(DEMO_SFT)" bash scripts/demo.sh $(BUILD)/distflow $(ALGO)

bench: build
	@bash scripts/install-deps.sh --bench
	@bash scripts/bench.sh $(BUILD)

mutate: deps
	@bash scripts/mutate.sh $(ARGS)

check-fresh:
	@bash scripts/check-fresh.sh $(ARGS)

fuzz:
	@bash scripts/install-deps.sh --fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash scripts/fuzz.sh $(ARGS)

test-asan: deps
	@JOBS=$(JOBS) bash scripts/test-asan.sh $(ARGS)

clean:
	rm -rf $(BUILD) $(BUILD)-alt build-fuzz build-asan
