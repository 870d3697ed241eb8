#!/usr/bin/env bash
# bench/trees.py on the GPU machine, in the background:
#   TREES=a,b,c bash bench/gpu_trees.sh start OUTDIR   # install flashbuild, start the harness
#   bash bench/gpu_trees.sh poll OUTDIR                 # wait (at most ~9 min a call), collect
# Runs `python3 bench/trees.py --only $TREES --arch ${TREES_ARCH:-sm_90a} --tests` with the
# sdists carried in .devcarry/trees/ (the machine has no internet), the trees' upstream tests in
# .devcarry/tests/ (bench/tree_tests.py), and flashbuild's pure-Python dependencies as wheels
# in .whl/. Every stage is bounded by TREES_TIMEOUT seconds (400).
# The builds install wheels into the machine's Python: run it on a machine you throw away.
set -u
mode=${1:?start|poll}; out=${2:?OUTDIR}
mkdir -p "$out"
# shellcheck source=bench/gpu_install.sh
. bench/gpu_install.sh
work=/tmp/trees

if [ "$mode" = start ]; then
  gpu_install "$out" || exit 1
  pkill -f "bench/trees.py"; pkill -f "flashbuild build"; pkill -f ninja; sleep 1
  rm -rf "$work" && mkdir -p "$work/dl" && cp .devcarry/trees/* "$work/dl/" || exit 1
  setsid python3 bench/trees.py --only "${TREES:?TREES=a,b,c}" --arch "${TREES_ARCH:-sm_90a}" \
    --work "$work" --out "$work/results" --tests --timeout "${TREES_TIMEOUT:-400}" \
    > "$work/harness.log" 2>&1 < /dev/null &
  echo "harness started: $TREES"
  exit 0
fi

for _ in $(seq 1 105); do
  grep -q "^results:" "$work/harness.log" 2>/dev/null && break
  sleep 5
done
cp -r "$work/results/." "$out/" 2>/dev/null
cp "$work/harness.log" "$out/"
cat "$work/harness.log"
grep -q "^results:" "$work/harness.log" || { echo "still running"; exit 3; }
