#!/usr/bin/env bash
# The README's example lines that compile (build, verify), run as written on the GPU machine,
# and FlashRT built as an RTX 5090 owner types it (`--arch sm_120`):
#   bash bench/gpu_readme.sh start OUTDIR   # install flashbuild, unpack, start the queue
#   bash bench/gpu_readme.sh poll OUTDIR    # wait (at most ~9 min a call), collect results
# The queue runs in the background (setsid) and goes on between calls:
#   FLASHBUILD_README_BUILDS=1 pytest tests/integration/test_readme_commands.py  (every line)
#   flashbuild build /tmp/readme/FlashRT --arch sm_120 --install none, then verify --no-gpu
# Expects FlashMLA.tar.gz and FlashRT.tar.gz in .devcarry/ and flashbuild's pure-Python
# dependencies as wheels in .whl/ (the machine has no internet). The README lines install
# flashkern and flash_mla into the machine's Python: run it on a machine you throw away.
set -u
mode=${1:?start|poll}; out=${2:?OUTDIR}
mkdir -p "$out"
# shellcheck source=bench/gpu_install.sh
. bench/gpu_install.sh
work=/tmp/readme

if [ "$mode" = start ]; then
  gpu_install "$out" || exit 1
  # The README test reads the corpus from ../shared/corpus beside the repository.
  mkdir -p ../shared/corpus && cp .devcarry/FlashMLA.tar.gz ../shared/corpus/ || exit 1
  rm -rf "$work" && mkdir -p "$work" && tar xzf .devcarry/FlashRT.tar.gz -C "$work" || exit 1
  cat > "$work/queue.sh" <<'EOF'
set -u
work=/tmp/readme
now() { python3 -c "import time; print(f'{time.monotonic():.3f}')"; }
timed() {  # timed NAME COMMAND...: run, keep its output in NAME.txt, one summary line
  local name=$1; shift
  local t0 t1 rc
  t0=$(now); "$@" > "$work/$name.txt" 2>&1; rc=$?; t1=$(now)
  echo "$name rc=$rc seconds=$(python3 -c "print(round($t1 - $t0, 2))")" >> "$work/summary.txt"
}
timed readme env FLASHBUILD_README_BUILDS=1 python3 -m pytest -o addopts="" -p no:cacheprovider \
  -q -rA tests/integration/test_readme_commands.py
timed flashrt-sm120 python3 -m flashbuild build "$work/FlashRT" --arch sm_120 --install none
timed flashrt-rerun python3 -m flashbuild build "$work/FlashRT" --arch sm_120 --install none
touch "$work/queue.done"
EOF
  setsid bash "$work/queue.sh" > "$work/queue.log" 2>&1 < /dev/null &
  echo "queue started"
  exit 0
fi

for _ in $(seq 1 100); do [ -f "$work/queue.done" ] && break; sleep 5; done
cp "$work"/*.txt "$out"/ 2>/dev/null
cat "$work/summary.txt" 2>/dev/null
if [ ! -f "$work/queue.done" ]; then
  echo "still running:"; tail -n 5 "$work/queue.log"
  ps -eo etimes,args | grep -E 'nvcc|cicc|ptxas|pytest|pip' | grep -v grep | cut -c1-160 | head -6
  exit 3
fi
