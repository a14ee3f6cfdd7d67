# kizuna's entry point. Each target installs what it needs first, so on a
# fresh Debian 12 machine (as root) `make demo` and `make test` are one
# command each. Everything real happens in CMake; this file only sequences.
#
#   make deps      install the missing Debian packages (apt-get)
#   make build     configure and build into $(BUILD)
#   make test      build, then run every test (ctest)
#   make demo      build, then run the main demonstration
#   make bench     build, then run the benchmarks
#   make bench-compare  build, then kizuna vs Gloo vs Open MPI in one run
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

.PHONY: all deps configure build test demo bench bench-compare install clean

all: build

deps:
	@scripts/deps.sh

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

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)
