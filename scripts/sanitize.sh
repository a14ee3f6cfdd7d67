#!/usr/bin/env bash
# scripts/sanitize.sh KIND [BUILD_DIR]: build the unit, multi-process and
# two-namespace tests with one sanitizer and run them
# (`make test-asan`, `make test-ubsan`, `make test-tsan`).
#   KIND       address | undefined | thread
#   BUILD_DIR  default build-asan, build-ubsan or build-tsan
# The tree is configured with -DKIZUNA_SANITIZE=KIND and without CUDA, torch
# and the benchmarks (none of which the sanitizers can see through), built,
# and `ctest -L "$SAN_LABELS"` runs with the runtime set to stop at the first
# report and fail the test (exit code 66), so any finding fails the run.
# Forked ranks inherit the options, so a report in a worker fails its test.
# Suppressions, each with its reason, live in tests/sanitizers/KIND.supp and
# are used only when that file exists. Knobs: SAN_LABELS (default
# 'unit|multiproc|netns'; the netns tests skip where namespaces are
# refused), JOBS, BUILD_TYPE, CMAKE_ARGS, CTEST_ARGS (e.g. -R name).
set -euo pipefail
kind=${1:?usage: scripts/sanitize.sh address|undefined|thread [BUILD_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
case $kind in
  address) short=asan ;;
  undefined) short=ubsan ;;
  thread) short=tsan ;;
  *) echo "sanitize.sh: KIND '$kind': accepted values are address, undefined, thread" >&2; exit 2 ;;
esac
build=${2:-$root/build-$short}
jobs=${JOBS:-$(nproc)}
labels=${SAN_LABELS:-unit|multiproc|netns}
supp=$root/tests/sanitizers/$kind.supp

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DKIZUNA_SANITIZE="$kind" -DKIZUNA_CUDA=OFF -DKIZUNA_TORCH=OFF -DKIZUNA_BENCH=OFF \
  ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$jobs"

# Common to all three: report, then exit 66 (not abort, so a worker's report
# reads as an exit code in the driver's output, never as a hang or a signal).
common="halt_on_error=1:abort_on_error=0:exitcode=66"
case $kind in
  address)
    export ASAN_OPTIONS="$common:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
    export LSAN_OPTIONS="exitcode=66"
    if [[ -f $supp ]]; then LSAN_OPTIONS+=":suppressions=$supp"; fi
    ;;
  undefined)
    export UBSAN_OPTIONS="$common:print_stacktrace=1"
    if [[ -f $supp ]]; then UBSAN_OPTIONS+=":suppressions=$supp"; fi
    ;;
  thread)
    export TSAN_OPTIONS="$common:second_deadlock_stack=1:history_size=4"
    if [[ -f $supp ]]; then TSAN_OPTIONS+=":suppressions=$supp"; fi
    ;;
esac
# Left out, with the reason:
#   install: (address only) its consumers, built outside this tree, were
#     refused by ASan when built without -fsanitize ("runtime does not come
#     first"); they now get libkizuna's sanitizer flags, which made the test
#     pass under ThreadSanitizer, but that has not been run under ASan yet.
#     The test is about packaging, and `make test` runs it.
exclude=()
if [[ $kind == address ]]; then exclude=(-E '^install: '); fi
cd "$build"
# shellcheck disable=SC2086
ctest -L "$labels" "${exclude[@]}" --output-on-failure -j "$jobs" ${CTEST_ARGS:-}
