#!/usr/bin/env bash
# bench/trees.py on the GPU machine, in the background:
#   TREES='a,b;c,d' bash bench/gpu_trees.sh start OUTDIR  # install flashbuild, start the harness
#   bash bench/gpu_trees.sh poll OUTDIR                    # wait (POLL_S, 500 s), collect
# Runs `python3 bench/trees.py --only LANE --arch ${TREES_ARCH:-sm_90a} --tests` once per lane
# (`;` separates lanes, `,` the trees of one lane), the lanes side by side: most practice trees
# compile a handful of units, so one tree at a time leaves most of the 16 cores idle. The
# sdists come from .devcarry/trees/ (the machine has no internet), the trees' upstream tests
# from .devcarry/tests/ (bench/tree_tests.py), flashbuild's pure-Python dependencies as wheels
# from .whl/. Every stage is bounded by TREES_TIMEOUT seconds (400); TREES_TESTS=0 leaves the
# tests out (a build for an arch this GPU cannot run). A lane written `sm_120:a,b` builds its
# trees for that arch and runs no tests (this GPU cannot run them); the others take TREES_ARCH.
# Wheels in .devcarry/env/ go into the machine's Python first, without their dependencies: a
# tree's runtime requirement that the machine (no index) lacks, whose own requirements it
# has under other names (mmengine asks for opencv-python; the image has opencv-python-headless).
# The builds install wheels into the machine's Python: run it on a machine you throw away, and
# never put one tree in two lanes (an sm_120 lane's install overwrites the other's modules).
# What comes back: OUTDIR/lanes.txt, every lane in one file (a call returns few files).
set -u
mode=${1:?start|poll}; out=${2:?OUTDIR}
mkdir -p "$out"
# shellcheck source=bench/gpu_install.sh
. bench/gpu_install.sh
work=/tmp/trees

if [ "$mode" = start ]; then
  gpu_install "$out" || exit 1
  if compgen -G ".devcarry/env/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-cache-dir .devcarry/env/*.whl \
      || exit 1
    echo "environment: $(cd .devcarry/env && echo *.whl)"
  fi
  pkill -f "bench/trees.py"; pkill -f "flashbuild build"; pkill -f ninja; sleep 1
  # The image's CXX (/opt/gcc/bin/g++, a g++ wrapper with its own -B folders) links libstdc++
  # statically, which verify fails since 27c5473 (a C++ exception across torch crashes the
  # process: marlin's own test_errors, SIGSEGV, 2026-11-29): the lanes take the system
  # compiler when a probe link says so. Written after that session's last device call.
  if [ -n "${CXX:-}" ] && [ -x /usr/bin/g++ ] && command -v readelf >/dev/null; then
    printf '#include <stdexcept>\nvoid f() { throw std::runtime_error("x"); }\n' \
      > /tmp/cxxprobe.cpp
    if "$CXX" -shared -fPIC /tmp/cxxprobe.cpp -o /tmp/cxxprobe.so 2>/dev/null &&
        ! readelf -d /tmp/cxxprobe.so | grep -q 'libstdc++'; then
      echo "CXX=$CXX links libstdc++ statically: the lanes build with /usr/bin/g++"
      export CXX=/usr/bin/g++ CC=/usr/bin/gcc
      # With CXX switched alone, torchmcubes (CMake, CUDA sources) still linked libstdc++.a:
      # its nvcc commands carried -ccbin=/opt/gcc/bin/g++ (where from was not traced: not
      # CMAKE_CUDA_HOST_COMPILER in its cache) and CMake added that compiler's library folders
      # (-L/opt/gcc/lib) to the module's link (2026-11-29). CUDAHOSTCXX names the host
      # compiler CMake gives nvcc.
      export CUDAHOSTCXX=/usr/bin/g++
      [ -n "${NVCC_CCBIN:-}" ] && export NVCC_CCBIN=/usr/bin/g++
    fi
  fi
  IFS=';' read -ra lanes <<<"${TREES:?TREES='a,b;c'}"
  # Every lane installs into this one Python: a tree in two lanes (sm_90a and sm_120) would be
  # verified against whichever install came last (a false result, seen once).
  twice=$(for lane in "${lanes[@]}"; do tr ',' '\n' <<<"${lane#*:}"; done | sort | uniq -d)
  if [ -n "$twice" ]; then
    echo "a tree in two lanes installs twice into one Python: $twice; run it in one lane" >&2
    exit 2
  fi
  rm -rf "$work" && mkdir -p "$work/dl" && cp .devcarry/trees/* "$work/dl/" || exit 1
  tests=--tests; [ "${TREES_TESTS:-1}" = 0 ] && tests=
  n=0
  for lane in "${lanes[@]}"; do
    n=$((n + 1)); mkdir -p "$work/lane$n"; ln -s ../dl "$work/lane$n/dl"
    arch=${TREES_ARCH:-sm_90a}; lane_tests=$tests
    case $lane in *:*) arch=${lane%%:*}; lane=${lane#*:}; lane_tests= ;; esac
    # shellcheck disable=SC2086
    setsid python3 bench/trees.py --only "$lane" --arch "$arch" \
      --work "$work/lane$n" --out "$work/lane$n/results" $lane_tests \
      --timeout "${TREES_TIMEOUT:-400}" > "$work/lane$n/harness.log" 2>&1 < /dev/null &
    echo "lane $n started: $lane ($arch)"
  done
  exit 0
fi

collect() {
  # A device call returns a handful of files (8 came back of 30 with a file per lane and
  # kind): everything goes into one file, each lane's harness log, its trees.json and the
  # tail of each stage log. Called on every round of the wait, so a poll that is cut short
  # (the call's time limit) still leaves what finished in OUTDIR.
  for dir in "$work"/lane*/; do
    echo "##### $(basename "$dir")"
    cat "$dir/harness.log" 2>/dev/null
    echo "--- trees.json"; cat "$dir/results/trees.json" 2>/dev/null
    for log in "$dir"/results/logs/*.txt; do
      [ -f "$log" ] && { echo "--- $(basename "$log")"; tail -c 6000 "$log"; }
    done
  done > "$out/lanes.txt"
}

# POLL_S (default 500) bounds the wait: keep it under the call's limit, or the machine and
# the lanes on it are gone with the call.
deadline=$((SECONDS + ${POLL_S:-500}))
# No lanes: this is a fresh machine (the one that ran `start` went back after its idle time),
# and waiting would spend the whole POLL_S on nothing.
compgen -G "$work/lane*/harness.log" >/dev/null || {
  echo "no lanes on this machine: run start again (the machine that ran it is gone)"; exit 2; }
while :; do
  pending=0
  for log in "$work"/lane*/harness.log; do
    grep -q "^results:" "$log" 2>/dev/null || pending=1
  done
  collect
  [ "$pending" = 0 ] && break
  [ "$SECONDS" -ge "$deadline" ] && break
  sleep 5
done
for dir in "$work"/lane*/; do
  echo "== $(basename "$dir")"; cat "$dir/harness.log"
done
[ "$pending" = 0 ] || { echo "still running"; exit 3; }
