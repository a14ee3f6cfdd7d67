#!/bin/sh
# tests/faults/report.sh BUILD_DIR [ctest options...]
#
# Runs the fault-injection suite (CTest label faults) in BUILD_DIR and
# prints its figures as a Markdown table: per fault, the trials, the errors
# raised correctly (of those checked), hangs, and the time from the fault to
# each error (p50, p99, max). Every test prints its own "FAULTS |" line; this
# collects them through KZ_FAULTS_REPORT. KZ_FAULTS_SEED picks other
# random kills (the default seed is fixed, so runs repeat).
set -eu
build=${1:?usage: tests/faults/report.sh BUILD_DIR [ctest options...]}
shift
report=$(mktemp /tmp/kizuna-faults-report-XXXXXX)
trap 'rm -f "$report"' EXIT
status=0
KZ_FAULTS_REPORT=$report ctest --test-dir "$build" -L faults --output-on-failure "$@" || status=$?
echo
echo "| fault | trials | errors raised correctly | hangs | detection p50 (ms) | p99 (ms) | max (ms) | notes |"
echo "|---|---|---|---|---|---|---|---|"
sed -n 's/^FAULTS | /| /p' "$report"
exit $status
