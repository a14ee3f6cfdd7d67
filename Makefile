# kizuna's entry point. Each target installs what it needs first, so on a
# fresh Debian 12 machine (as root) `make demo` and `make test` are one
# command each. Everything real happens in CMake; this file only sequences.
#
#   make deps      install the missing Debian packages (apt-get), then make
#                  .venv-torch, the venv with PyPI's torch 2.x that the torch
#                  backend's second flavour is built with (scripts/venv_torch.sh;
#                  without PyPI it says so and its tests are skipped)
#   make build     configure and build into $(BUILD)
#   make test      build, then run every test (ctest)
#   make demo      build, then run the main demonstration
#   make bench     build, then run the benchmarks (scripts/bench.sh): raw
#                  results and report.md in $(BUILD)/bench-results/
#   make bench-compare  build, then kizuna vs Gloo vs Open MPI in one run
#                  (scripts/bench_compare.sh): raw results, report.md and
#                  plots/ in $(BUILD)/bench-compare/ (a long run)
#   make bench-tcp-small build, then small all-reduces over loopback TCP:
#                  kizuna, Open MPI and the bare exchange under both
#                  (scripts/bench_tcp_small.sh), a table of medians
#   make bench-auto build, then auto against every forced algorithm and route,
#                  after calibrating a tuning profile (scripts/bench_auto.sh):
#                  report.md in $(BUILD)/bench-auto/ (a long run)
#   make bench-auto-doc put that report into docs/performance.md
#   make bench-doc rewrite the generated part of docs/performance.md and the
#                  plots in docs/plots/ from the results in
#                  $(BUILD)/bench-compare/ (running bench-compare first
#                  when there are none); the only target that writes docs/
#   make test-asan   unit, multiproc and netns tests under ASan (+ leaks)
#   make test-ubsan  the same under UndefinedBehaviorSanitizer
#   make test-tsan   the same under ThreadSanitizer
#                  (each in its own $(BUILD)-asan|-ubsan|-tsan, without CUDA,
#                  torch or benchmarks; any report fails; scripts/sanitize.sh,
#                  suppressions with reasons in tests/sanitizers/; not in
#                  `make test`, they take many minutes each)
#   make fuzz      every libFuzzer target (tests/fuzz) for FUZZ_SECONDS (60) each,
#                  with clang, in $(BUILD)-fuzz; prints executions and crashes
#   make soak      build, then 4 ranks run random collectives, each result
#                  checked, for SOAK_SECONDS (600); fails on a wrong result or
#                  resident-memory growth (tests/soak/soak.cpp)
#   make install   install into $(PREFIX)
#   make clean     remove $(BUILD)
#
# Variables: BUILD (build dir), BUILD_TYPE, JOBS, PREFIX, CMAKE_ARGS (extra
# -D options, e.g. CMAKE_ARGS=-DKIZUNA_CUDA=OFF).

BUILD      ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local
CMAKE_ARGS ?=
FUZZ_SECONDS ?= 60
SOAK_SECONDS ?= 600

.PHONY: all deps configure build test demo bench bench-compare bench-tcp-small bench-doc bench-auto bench-auto-doc install clean
.PHONY: fuzz soak
.PHONY: test-asan test-ubsan test-tsan

all: build

deps:
	@scripts/deps.sh
	@scripts/venv_torch.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

bench: build
	@scripts/bench.sh $(BUILD)

bench-compare: build
	@scripts/bench_compare.sh $(BUILD)

bench-tcp-small: build
	@scripts/bench_tcp_small.sh $(BUILD)

bench-auto: build
	@scripts/bench_auto.sh $(BUILD)

bench-auto-doc:
	@ls $(BUILD)/bench-auto/*.json >/dev/null 2>&1 || $(MAKE) bench-auto
	@scripts/bench_auto.sh --doc $(BUILD)

bench-doc:
	@ls $(BUILD)/bench-compare/*.json >/dev/null 2>&1 || $(MAKE) bench-compare
	@scripts/bench_compare.sh --doc $(BUILD)

SANITIZE = JOBS=$(JOBS) BUILD_TYPE=$(BUILD_TYPE) CMAKE_ARGS="$(CMAKE_ARGS)" scripts/sanitize.sh

test-asan: deps
	@$(SANITIZE) address $(BUILD)-asan

test-ubsan: deps
	@$(SANITIZE) undefined $(BUILD)-ubsan

test-tsan: deps
	@$(SANITIZE) thread $(BUILD)-tsan

fuzz: deps
	@tests/fuzz/fuzz_all.sh $(BUILD)-fuzz $(FUZZ_SECONDS) $(JOBS)

soak: build
	KIZUNA_CHECK=1 $(BUILD)/bin/kizuna-run --nproc-per-node 4 -- $(BUILD)/bin/kizuna-soak --seconds $(SOAK_SECONDS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)
